"""Helm values of the AWS EFA device plugin (chart `aws-efa-k8s-device-plugin`, >= 0.5.10).

It advertises `vpc.amazonaws.com/efa` on the nodes of EFA pools so NCCL jobs can request the interfaces. It
runs only on the instance types of this cluster's EFA pools (the chart's own list lags new instance types)
and tolerates the GPU taint and the pools' extra taints.
"""

from __future__ import annotations

from typing import Any

from infra.addons.gpu_operator import tolerations
from infra.spec import ClusterSpec

NAMESPACE = "kube-system"


def efa_pools(spec: ClusterSpec) -> list[str]:
    return [p.name for p in spec.node_pools if p.efa]


def efa_values(spec: ClusterSpec) -> dict[str, Any]:
    # Every type an EFA pool may launch (Karpenter pools allow `instanceTypes` beside `instanceType`).
    types = sorted(
        {t for p in spec.node_pools if p.efa for t in [p.instance_type, *(p.instance_types or [])] if t}
    )
    return {
        "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"], "values": types},
        "tolerations": tolerations(spec),
    }
