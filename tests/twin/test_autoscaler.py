"""The cluster-autoscaler stand-in (twin.autoscaler) against the real scheduler and Kueue on the dev stack's twin:
its one GPU group (`l40s`, g6e.xlarge with one GPU, 0 to 2 nodes) starts empty, and the stand-in's clock runs a
hundred times the wall's (tests.twin.conftest.TIME_SCALE). What it does is what cluster-autoscaler 1.35 does for
the same pods (each behaviour's source is cited in the stand-in's modules)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from infra.aws.node_daemonsets import node_daemonsets
from infra.aws.node_room import node_room, room_warnings
from infra.scheduling import pool_view
from infra.stackfile import load_stack
from scheduler.gpu_share import share_number
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube, job, name, pod
from tests.twin.test_team_rules import pods_of
from twin.autoscaler.fit import quantity

GPU = "nvidia.com/gpu"
GROUP = "gpufleet-dev-l40s"
NODEGROUP = "eks.amazonaws.com/nodegroup"
SYSTEM = "kube-system"  # scheduler.guard lets GPU pods be created here


@pytest.fixture(scope="module")
def dev_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    twin = start_twin(tmp_path_factory, "dev")
    yield Kube.of(twin)
    twin.stop()


def group_nodes(kube: Kube) -> list[str]:
    return [n["metadata"]["name"] for n in kube.items("nodes", selector=f"{NODEGROUP}={GROUP}")]


def events(kube: Kube, pod: dict[str, Any], reason: str) -> list[str]:
    return [
        e["message"]
        for e in kube.items("events", pod["metadata"]["namespace"])
        if e["involvedObject"].get("uid") == pod["metadata"]["uid"] and e["reason"] == reason
    ]


def one_pod(kube: Kube, job_name: str) -> dict[str, Any]:
    return dict(eventually(lambda: (pods_of(kube, "research", job_name) or [None])[0], f"{job_name}'s pod"))


def test_a_gpu_job_gets_a_node_which_goes_once_empty(dev_twin: Kube) -> None:
    """The pod is unschedulable on an empty group: one node is added (TriggeredScaleUp, `0->1 (max: 2)`), the
    pod is bound when it joins; once the job is gone the empty node is removed after the unneeded time."""
    member = dev_twin.as_member(("gpufleet:research",))
    train = name("train")
    assert member.create(job(train, "research", {"cpu": "2", "memory": "8Gi", GPU: 1})).ok
    try:
        pod = one_pod(dev_twin, train)
        triggered = eventually(lambda: events(dev_twin, pod, "TriggeredScaleUp"), "the scale-up event", 60)
        assert f"{GROUP} 0->1 (max: 2)" in triggered[0], triggered
        node = eventually(lambda: one_pod(dev_twin, train)["spec"].get("nodeName"), "the pod bound", 60)
        assert node in group_nodes(dev_twin)
    finally:
        member.delete("job", train, "research")
    eventually(lambda: not group_nodes(dev_twin), "the empty node removed", 90)


def test_a_pod_no_group_can_host_adds_no_node_and_says_why(dev_twin: Kube) -> None:
    """Two GPUs in one pod: no node of the group has two, so nothing is added and the pod's event gives the
    scheduler's reasons per group, as the autoscaler's NotTriggerScaleUp does."""
    member = dev_twin.as_member(("gpufleet:research",))
    wide = name("wide")
    assert member.create(job(wide, "research", {"cpu": "2", "memory": "8Gi", GPU: 2})).ok
    try:
        pod = one_pod(dev_twin, wide)
        said = eventually(lambda: events(dev_twin, pod, "NotTriggerScaleUp"), "the no-scale-up event", 60)
        assert said[0].startswith("pod didn't trigger scale-up: "), said
        assert f"Insufficient {GPU}" in said[0], said
        assert not group_nodes(dev_twin)
        assert not events(dev_twin, pod, "TriggeredScaleUp")
    finally:
        member.delete("job", wide, "research")


def system_pod(kube: Kube, pod_name: str) -> dict[str, Any] | None:
    return next((p for p in kube.items("pods", SYSTEM) if p["metadata"]["name"] == pod_name), None)


def test_a_pod_above_allocatable_scales_up_once_then_the_real_node_is_remembered(dev_twin: Kube) -> None:
    """From zero nodes the autoscaler's AWS template has the instance's whole memory (32 GiB), so a pod asking
    31.5 GiB triggers a scale-up; the node that joins has 31203 MiB allocatable (the kubelet's reservation), the
    pod stays Pending, and from then on the autoscaler knows the real node: no second scale-up, the reason
    instead. The pod is an administrator's in kube-system, the one namespace besides the GPU operator's where a
    GPU pod may bypass the teams' queues (scheduler.guard): a team's GPU pod that large is refused when it is
    created (the next test)."""
    big = name("big")
    toleration = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
    assert dev_twin.create(pod(big, SYSTEM, {"cpu": "2", "memory": "32256Mi", GPU: 1},
                               tolerations=[toleration])).ok  # fmt: skip
    try:
        found = eventually(lambda: system_pod(dev_twin, big), "the pod")
        eventually(lambda: events(dev_twin, found, "TriggeredScaleUp"), "the first scale-up", 60)
        eventually(lambda: len(group_nodes(dev_twin)) == 1, "the node joined", 60)
        said = eventually(
            lambda: events(dev_twin, found, "NotTriggerScaleUp"), "the reason once the node is known", 60
        )
        assert "Insufficient memory" in said[0], said
        assert len(events(dev_twin, found, "TriggeredScaleUp")) == 1
        left = system_pod(dev_twin, big)
        assert left is not None and not left["spec"].get("nodeName")
    finally:
        dev_twin.delete("pod", big, SYSTEM)
    eventually(lambda: not group_nodes(dev_twin), "the empty node removed", 90)


def daemon_pods(kube: Kube, node: str) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.items("pods")
        if p["spec"].get("nodeName") == node
        and any(o["kind"] == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
    ]


def test_a_job_sized_to_the_room_runs_and_one_sized_to_allocatable_is_refused(dev_twin: Kube) -> None:
    """EKS's and the stack's DaemonSets put a pod on every node (the real DaemonSet controller and scheduler),
    and the plan's warning for the pool says how much they take, the largest pod that fits and what a GPU pod
    may ask per GPU: a job of that size gets a node (the autoscaler's template counts the DaemonSet pods too) and
    runs, and the node carries the overhead the warning names. A job asking the node's whole allocatable is
    refused when it is created, naming that share, where Kueue's quota, which counts the whole node, would have
    admitted it to stay Pending."""
    spec = load_stack(ROOT / "Pulumi.dev.yaml")
    room = node_room(spec, spec.node_pools[0])
    assert room is not None
    views = [pool_view(spec, p) for p in spec.node_pools]
    warning = next(w for w in room_warnings(spec, views) if w.startswith("nodePools[0] (l40s)"))
    (cpu, mib), (fit_cpu, fit_mib) = room.allocatable, room.room
    assert f"at most cpu {fit_cpu}m and memory {fit_mib}Mi" in warning, warning
    assert "refused when it is created" in warning, warning
    member = dev_twin.as_member(("gpufleet:research",))
    full, fits = name("full"), name("fits")
    refused = member.create(job(full, "research", {"cpu": f"{cpu}m", "memory": f"{mib}Mi", GPU: 1}))
    assert not refused.ok
    share = f"{GPU}: {share_number(fit_cpu / 1000)}"
    assert "asks more cores or memory per GPU than a node of its pool offers" in refused.err, refused.err
    assert share in refused.err, (share, refused.err)
    assert member.create(job(fits, "research", {"cpu": f"{fit_cpu}m", "memory": f"{fit_mib}Mi", GPU: 1})).ok
    try:
        node = eventually(lambda: one_pod(dev_twin, fits)["spec"].get("nodeName"), "the sized job bound", 90)
        eventually(
            lambda: len(daemon_pods(dev_twin, node)) == len(node_daemonsets(spec, spec.node_pools[0]))
            and all(p["status"].get("phase") == "Running" for p in daemon_pods(dev_twin, node)),
            "the node's DaemonSet pods running", 60,
        )  # fmt: skip
        requests = [c["resources"].get("requests") or {} for p in daemon_pods(dev_twin, node)
                    for c in p["spec"]["containers"]]  # fmt: skip
        carried = (
            round(sum(quantity(r.get("cpu", 0)) for r in requests) * 1000),
            round(sum(quantity(r.get("memory", 0)) for r in requests) / 2**20),
        )
        assert carried == room.overhead, (carried, warning)
    finally:
        member.delete("job", fits, "research")
    eventually(lambda: not group_nodes(dev_twin), "the empty node removed", 90)
