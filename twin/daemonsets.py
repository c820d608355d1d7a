"""The DaemonSets of an EKS node on an aws twin, as DaemonSet objects the real controller-manager fans out.

Each DaemonSet of `infra.aws.node_daemonsets` becomes a DaemonSet with that pod's requests, its chart's priority
class (`system-node-critical`) and tolerations (every taint for EKS's own add-ons, the stack's GPU tolerations
for the rest), selecting the nodes it runs on by their pool label (`gpufleet.io/pool In [...]`, the way the EFA
chart selects; the others select by labels the twin's nodes share only with their pool). kube-controller-
manager's DaemonSet controller creates a pod per matching node, kube-scheduler binds it, and kwok runs it, so
the scheduler, Kueue's pods and the autoscaler stand-in all see the overhead as they would on EKS.
"""

from __future__ import annotations

from typing import Any

from infra.aws.node_daemonsets import NodeDaemonSet, node_daemonsets, runs_on
from infra.gpu_stack.gpu_operator import tolerations
from infra.spec import ClusterSpec
from scheduler.labels import POOL_LABEL

IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: kwok runs no containers


def _affinity(spec: ClusterSpec, daemonset: NodeDaemonSet) -> dict[str, Any]:
    if daemonset.runs_on == "all":
        return {}
    pools = sorted(p.name for p in spec.node_pools if runs_on(daemonset, p))
    term = {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": pools}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def daemonset_manifest(spec: ClusterSpec, daemonset: NodeDaemonSet) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": daemonset.name}
    pod: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "automountServiceAccountToken": False,
        "tolerations": [{"operator": "Exists"}] if daemonset.tolerates_all else tolerations(spec),
        "containers": [
            {"name": daemonset.name, "image": IMAGE, "resources": {"requests": dict(daemonset.requests)}}
        ],
    }
    if affinity := _affinity(spec, daemonset):
        pod["affinity"] = affinity
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": daemonset.name, "namespace": daemonset.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def node_daemonset_manifests(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every DaemonSet some node of the aws stack runs (the system pool's and each pool's), once."""
    seen: dict[str, NodeDaemonSet] = {}
    for pool in [None, *spec.node_pools]:
        for d in node_daemonsets(spec, pool):
            seen.setdefault(d.name, d)
    return [daemonset_manifest(spec, d) for d in seen.values()]
