"""Helm values of the AWS EFA device plugin (chart `aws-efa-k8s-device-plugin`, >= 0.5.10).

It advertises `vpc.amazonaws.com/efa` on the nodes of EFA pools so NCCL jobs can request the interfaces. It
runs only on the nodes of this cluster's EFA pools, selected by their pool label (`gpufleet.io/pool`, which
every node of a pool carries, see scheduler.labels.pool_node_labels), and tolerates the GPU taint and the
pools' extra taints. Selecting by instance type is not enough: a pool of an EFA-capable type may run without
EFA (`efa: false`, e.g. example-prod's p5.48xlarge MIG pool), its nodes have no EFA interfaces, and the plugin
crash-loops there ("No valid EFA devices found"). The chart turns
`supportedInstanceLabels` into the DaemonSet's required node affinity, one `In` term per key
(aws/eks-charts stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml), so the key is the pool label and
the values the EFA pools. Its image comes from the stack's own region's EKS registry (the chart's default
repository is us-west-2's, which China and GovCloud nodes cannot pull and every other region pulls across
regions); the tag stays the chart's.
"""

from __future__ import annotations

from typing import Any

from infra.aws.addons.registries import eks_addon_registry
from infra.gpu_stack.gpu_operator import tolerations
from infra.spec import ClusterSpec
from scheduler.labels import POOL_LABEL

NAMESPACE = "kube-system"
IMAGE_PATH = "eks/aws-efa-k8s-device-plugin"


def efa_pools(spec: ClusterSpec) -> list[str]:
    return [p.name for p in spec.node_pools if p.efa]


def efa_values(spec: ClusterSpec) -> dict[str, Any]:
    registry = eks_addon_registry(spec.region or "")
    if registry is None:  # infra.rules refuses EFA pools in such regions before anything runs
        raise ValueError(f"no EKS add-on registry known for region {spec.region!r}")
    return {
        "image": {"repository": f"{registry}/{IMAGE_PATH}"},
        # Node affinity `gpufleet.io/pool In [<EFA pools>]`: only nodes of pools with `efa: true`.
        "supportedInstanceLabels": {"keys": [POOL_LABEL], "values": sorted(efa_pools(spec))},
        "tolerations": tolerations(spec),
    }
