"""The DaemonSets every EKS node of a stack runs, with what each pod requests: pure, from the spec.

A node's allocatable is not what a user pod can have: every DaemonSet pod on the node requests its share first,
and kube-scheduler and cluster-autoscaler both count it (the autoscaler adds the DaemonSet pods a fresh node will
run to its template, cluster-autoscaler 1.35.2 simulator/node_info_utils.go:62-80,
`SanitizedTemplateNodeInfoFromNodeInfo` / `podsExpectedOnFreshNode`). The requests are the pinned charts'
defaults, which the stack does not override:

- `aws-node` (VPC CNI, installed by EKS): cpu 25m (aws/amazon-vpc-cni-k8s v1.23.0
  charts/aws-vpc-cni/values.yaml:190-192; its node agent container has `resources: {}`, :57);
- `kube-proxy` (installed by EKS): cpu 100m, the request of the EKS kube-proxy add-on's DaemonSet
  (`eks.amazonaws.com/component: kube-proxy`; EKS publishes no chart for it);
- `eks-node-monitoring-agent`: cpu 10m, memory 30Mi (aws/eks-node-monitoring-agent v1.6.6
  charts/eks-node-monitoring-agent/values.yaml:77-84); its `dcgm-server` on NVIDIA instance types has
  `resources: {}` (:148-149);
- `aws-efa-k8s-device-plugin` on EFA pools: cpu 10m, memory 20Mi (aws/eks-charts
  stable/aws-efa-k8s-device-plugin/values.yaml:317-327 at chart v0.5.30, the newest that repository's history
  holds; the pinned v0.5.31 only moved the image);
- the GPU operator's `node-feature-discovery` worker on every node: cpu 5m, memory 64Mi (NVIDIA/gpu-operator
  v26.7.0 deployments/gpu-operator/charts/node-feature-discovery/values.yaml:757-768, NFD chart 0.19.0);
- the GPU operator's operands on GPU nodes (device plugin, GPU feature discovery, dcgm-exporter, the
  validator; mig-manager on MIG pools): `resources: {}` in v26.7.0 deployments/gpu-operator/values.yaml
  (:67, :250, :307, :367, :378), so they take a pod slot each and no CPU or memory. The driver and toolkit
  operands do not run on EKS: the AMI carries both (`infra.gpu_stack.gpu_operator.operator_manages_driver`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from infra.spec import ClusterSpec, NodePool
from scheduler.labels import GPU_OPERATOR_NAMESPACE

KUBE_SYSTEM = "kube-system"
RunsOn = Literal["all", "gpu", "efa", "mig"]


@dataclass(frozen=True)
class NodeDaemonSet:
    """One DaemonSet of the nodes: where it runs, whether it tolerates every taint, and its pod's requests."""

    name: str
    namespace: str
    runs_on: RunsOn
    tolerates_all: (
        bool  # `operator: Exists` with no key (EKS's own add-ons); else the stack's GPU tolerations
    )
    requests: dict[str, str] = field(default_factory=dict)


DAEMONSETS: tuple[NodeDaemonSet, ...] = (
    NodeDaemonSet("aws-node", KUBE_SYSTEM, "all", True, {"cpu": "25m"}),
    NodeDaemonSet("kube-proxy", KUBE_SYSTEM, "all", True, {"cpu": "100m"}),
    NodeDaemonSet("eks-node-monitoring-agent", KUBE_SYSTEM, "all", True, {"cpu": "10m", "memory": "30Mi"}),
    NodeDaemonSet("dcgm-server", KUBE_SYSTEM, "gpu", False),
    NodeDaemonSet("aws-efa-k8s-device-plugin", KUBE_SYSTEM, "efa", False, {"cpu": "10m", "memory": "20Mi"}),
    NodeDaemonSet(
        "gpu-operator-node-feature-discovery-worker", GPU_OPERATOR_NAMESPACE, "all", False,
        {"cpu": "5m", "memory": "64Mi"},
    ),
    NodeDaemonSet("nvidia-device-plugin-daemonset", GPU_OPERATOR_NAMESPACE, "gpu", False),
    NodeDaemonSet("gpu-feature-discovery", GPU_OPERATOR_NAMESPACE, "gpu", False),
    NodeDaemonSet("nvidia-dcgm-exporter", GPU_OPERATOR_NAMESPACE, "gpu", False),
    NodeDaemonSet("nvidia-operator-validator", GPU_OPERATOR_NAMESPACE, "gpu", False),
    NodeDaemonSet("nvidia-mig-manager", GPU_OPERATOR_NAMESPACE, "mig", False),
)  # fmt: skip


def runs_on(daemonset: NodeDaemonSet, pool: NodePool | None) -> bool:
    """Whether the DaemonSet has a pod on a node of `pool` (None: the untainted system pool)."""
    if daemonset.runs_on == "all":
        return True
    if pool is None:
        return False
    if daemonset.runs_on == "efa":
        return bool(pool.efa)
    if daemonset.runs_on == "mig":
        return pool.sharing.mode == "mig"
    return True  # every pool of an aws stack is a GPU pool


def node_daemonsets(spec: ClusterSpec, pool: NodePool | None) -> list[NodeDaemonSet]:
    """The DaemonSets with a pod on each node of `pool` on an aws stack (none elsewhere)."""
    if spec.platform != "aws":
        return []
    return [d for d in DAEMONSETS if runs_on(d, pool)]
