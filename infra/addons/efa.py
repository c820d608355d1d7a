"""Helm values of the AWS EFA device plugin (chart `aws-efa-k8s-device-plugin`, >= 0.5.10).

It advertises `vpc.amazonaws.com/efa` on the nodes of EFA pools so NCCL jobs can request the interfaces. It
runs only on the instance types of this cluster's EFA pools (the chart's own list lags new instance types)
and tolerates the GPU taint and the pools' extra taints. Its image comes from the stack's own region's EKS
registry (the chart's default repository is us-west-2's, which China and GovCloud nodes cannot pull and
every other region pulls across regions); the tag stays the chart's.
"""

from __future__ import annotations

from typing import Any

from infra.addons.gpu_operator import tolerations
from infra.aws.registries import eks_addon_registry
from infra.spec import ClusterSpec

NAMESPACE = "kube-system"
IMAGE_PATH = "eks/aws-efa-k8s-device-plugin"


def efa_pools(spec: ClusterSpec) -> list[str]:
    return [p.name for p in spec.node_pools if p.efa]


def efa_values(spec: ClusterSpec) -> dict[str, Any]:
    types = sorted(
        {t for p in spec.node_pools if p.efa for t in (p.instance_types or [p.instance_type or ""]) if t}
    )
    registry = eks_addon_registry(spec.region or "")
    if registry is None:  # infra.rules refuses EFA pools in such regions before anything runs
        raise ValueError(f"no EKS add-on registry known for region {spec.region!r}")
    return {
        "image": {"repository": f"{registry}/{IMAGE_PATH}"},
        "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"], "values": types},
        "tolerations": tolerations(spec),
    }
