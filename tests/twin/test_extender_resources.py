"""The extender's resource model against the real kube-scheduler: a replay twin (twin.replay: kwok nodes, the
stacks' gpu-binpack profile with the extender as its filter and prioritizer, the extender's real entry point and
watch) with time-sliced GPU nodes.

Upstream rules: the device plugin allocates per container and refuses a container asking for more than one
replica (NVIDIA/k8s-device-plugin ``internal/plugin/server.go`` ``Allocate``, ``failRequestsGreaterThanOne``);
kube-scheduler v1.35.8 counts the containers' sum against the node's allocatable
(``pkg/scheduler/framework/plugins/noderesources/fit.go`` → k8s.io/component-helpers ``PodRequests``); an
extender's FailedAndUnresolvableNodes make the pod Unschedulable (``pkg/scheduler/schedule_one.go``
``findNodesThatPassExtenders``); the scheduler binds the pod itself and the extender's watch sees it bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.fgd.model import Cluster
from scheduler.labels import SHARED_GPU_RESOURCE
from tests.support import eventually
from tests.twin.conftest import toolchain
from twin.replay import NAMESPACE, ReplayTwin

NODES = ("l4-0", "l4-1")  # two, so the scheduler scores (one feasible node skips prioritize)


def pod(name: str, *replicas: int) -> dict[str, Any]:
    """A gpu-binpack pod with one container per entry of ``replicas``, each asking that many gpu.shared."""
    containers = [
        {"name": f"c{i}", "image": "busybox",
         "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {SHARED_GPU_RESOURCE: str(n)}}}
        for i, n in enumerate(replicas)
    ]  # fmt: skip
    spec = {"schedulerName": "gpu-binpack", "containers": containers}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def wait_schedulable(twin: ReplayTwin, names: tuple[str, ...], timeout: float = 120) -> None:
    """Until the nodes are Ready and free of the node lifecycle controller's NoSchedule/NoExecute taints
    (``node.kubernetes.io/not-ready``), which would make the pods Unschedulable for a reason of their own."""

    def ready() -> set[str]:
        out = set()
        for node in twin.core().list_node().items:
            conditions = {c.type: c.status for c in node.status.conditions or []}
            taints = [t for t in node.spec.taints or [] if t.effect in ("NoSchedule", "NoExecute")]
            if conditions.get("Ready") == "True" and not taints:
                out.add(node.metadata.name)
        return out

    eventually(lambda: set(names) <= ready(), f"nodes {names} to be schedulable", timeout, every=0.2)


def unschedulable_message(twin: ReplayTwin, body: dict[str, Any], timeout: float = 60) -> str:
    """Create the pod and return the scheduler's Unschedulable message (fails if the pod is bound instead)."""
    core = twin.core()
    core.create_namespaced_pod(NAMESPACE, body)
    name = body["metadata"]["name"]

    def message() -> str:
        got = core.read_namespaced_pod(name, NAMESPACE)
        assert not got.spec.node_name, f"{name} was bound to {got.spec.node_name}"
        for cond in got.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
                return str(cond.message)
        return ""

    return str(eventually(message, f"{name} to be found unschedulable", timeout, every=0.1))


def test_two_containers_of_one_replica_each_are_placed_through_the_extender(tmp_path: Path) -> None:
    """Nodes of one L4 time-sliced 4 ways: a pod of two 1-replica containers is filtered and scored by the
    extender, bound by the scheduler and seen bound by the extender's watch; one container asking two replicas, which every node's allocatable would hold, is refused by
    the extender with its reason, as the kubelet's device plugin would refuse it."""
    toolchain("1.35")
    cluster = Cluster.build(list(NODES), [16000] * 2, [65536] * 2, [1] * 2, ["L4"] * 2)
    twin = ReplayTwin.start(cluster, {"L4": 4}, "FragmentationAware", tmp_path / "fa")
    try:
        wait_schedulable(twin, NODES)
        assert twin.place(pod("two-slices", 1, 1)) in NODES
        extender_log = tmp_path / "fa" / "logs" / "extender.log"
        for verb in ("/filter", "/prioritize"):  # the access line is written once the reply is sent
            eventually(
                lambda v=verb: f"POST {v}" in extender_log.read_text(errors="replace"), verb, timeout=10
            )
        twin.settled(1)  # the extender's watch has the pod bound, no longer only assumed
        message = unschedulable_message(twin, pod("two-in-one", 2))
        assert "one per container" in message, message
    finally:
        twin.stop()
