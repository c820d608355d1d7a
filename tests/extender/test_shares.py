"""The extender with `--dra-shares`: its view fed the nodes, ResourceSlices and ResourceClaims of a metal stack's
`dra-shares` pool as the twin publishes them (twin.nodes, twin.dra), asked by pods that claim shares through a
team's rendered template."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from infra.stackfile import parse_config
from scheduler.dra import DRIVER, SHARES, claim_spec, claim_template, template_name
from scheduler.extender import wire
from scheduler.extender.view import CLAIM_WAIT_S, ExtenderView
from scheduler.extender.watch import (
    apply_claim_event,
    apply_pod_event,
    replace_claims,
    replace_nodes,
    replace_pods,
    replace_slices,
)
from scheduler.fgd.model import Workload
from scheduler.fgd.shares import free_shares, share_cluster, share_scores, share_target
from tests.conftest import ROOT
from twin.dra import resource_slices
from twin.nodes import twin_nodes

SHARE_NODES = ["gpu-l40s-01", "gpu-l40s-02", "gpu-l40s-03"]


@pytest.fixture(scope="module")
def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"])
    config["gpufleet:cluster"]["kubernetesVersion"] = "1.36"
    config["gpufleet:nodePools"][1]["sharing"] = "dra-shares"
    spec = parse_config(config, "shares")
    nodes = twin_nodes(spec)
    return [n.manifest() for n in nodes], resource_slices(spec, nodes)


def claim(name: str, shares: int, node: str = "", device: str = "", pod_uid: str = "") -> dict[str, Any]:
    """A claim made from the team's template; allocated (as kube-scheduler writes it) when a node is given."""
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "vision"},
        "spec": copy.deepcopy(claim_template("vision", shares)["spec"]["spec"]),
    }
    if node:
        result = {"request": "gpu", "driver": DRIVER, "pool": node, "device": device,
                  "consumedCapacity": {SHARES: str(shares)}, "shareID": f"{name}-id"}  # fmt: skip
        obj["status"] = {"allocation": {"devices": {"results": [result]}}}
        if pod_uid:
            obj["status"]["reservedFor"] = [{"resource": "pods", "name": pod_uid, "uid": pod_uid}]
    return obj


def share_pod(uid: str, shares: int, node: str = "") -> dict[str, Any]:
    """A pod of a Job claiming `shares` through the template; the claim the controller made is `<uid>-gpu`."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": uid, "namespace": "vision", "uid": uid},
        "spec": {
            "schedulerName": "gpu-binpack",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name(shares)}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "claims": [{"name": "gpu"}]},
                }
            ],
        },
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{uid}-gpu"}]},
    }
    if node:
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
    return pod


def ready_view(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    claims: list[dict[str, Any]],
    expected: Workload | None = None,
) -> ExtenderView:
    nodes, slices = cluster
    view = ExtenderView(expected=expected, dra_shares=True)
    replace_nodes(view, nodes)
    replace_pods(view, [])
    assert not view.ready  # the slices and claims are not listed yet
    replace_slices(view, slices)
    replace_claims(view, claims)
    assert view.ready
    return view


def priorities(view: ExtenderView, pod: dict[str, Any], names: list[str]) -> dict[str, int]:
    ranked = view.prioritize(wire.parse_args({"pod": pod, "nodenames": names}))
    host = "host" if "host" in ranked[0] else "Host"
    key = "score" if "score" in ranked[0] else "Score"
    return {h[host]: h[key] for h in ranked}


def test_a_share_pod_goes_where_fgd_over_the_free_shares_says(cluster: Any) -> None:
    """Half-GPU claims pending (the target); node 01 has a GPU with 5 shares free, node 02 one with 4, node 03
    none left. A 1-share pod on 02 would strand 3 shares no half-GPU claim can use: FGD scores 01 best, and
    MostAllocated's GPU count cannot tell them apart (DRA devices are no node resource)."""
    full = [claim(f"f{n}{g}", 8, node, f"gpu-{g}") for n, node in enumerate(SHARE_NODES) for g in range(3)]
    claims = [*full, claim("f03", 8, SHARE_NODES[2], "gpu-3"), claim("x", 3, SHARE_NODES[0], "gpu-3"),
              claim("y", 4, SHARE_NODES[1], "gpu-3")]  # fmt: skip
    claims += [claim(f"wait{i}", 4) for i in range(4)] + [claim("p1-gpu", 1)]
    view = ready_view(cluster, claims)
    got = priorities(view, share_pod("p1", 1), SHARE_NODES)
    assert got[SHARE_NODES[0]] == wire.MAX_PRIORITY
    assert got[SHARE_NODES[1]] < wire.MAX_PRIORITY and got[SHARE_NODES[2]] == 0
    # the one scoring code: the same ranking as share_scores on the same objects
    sc = share_cluster(
        free_shares(cluster[1], claims), dict.fromkeys(SHARE_NODES, 10**6), dict.fromkeys(SHARE_NODES, 10**9)
    )
    scores, _ = share_scores(sc, share_target([4, 4, 4, 4, 1], 8), 1)
    assert scores.tolist()[0] > scores.tolist()[1] >= 0 > scores.tolist()[2]


def test_a_chosen_node_holds_the_shares_until_the_claim_shows_them_then_counts_them_once(
    cluster: Any,
) -> None:
    """Two 6-share pods scored back to back, before either claim shows an allocation: the first is assumed on
    gpu-0 of the node FGD chose, so the second does not find those shares free there; the allocation arriving
    (reserved for the pod) replaces the assumption, counted once."""
    view = ready_view(cluster, [claim("a-gpu", 6), claim("b-gpu", 6)])
    first = priorities(view, share_pod("a", 6), SHARE_NODES)
    node = max(first, key=first.__getitem__)  # the one scored 10
    assert view.shares is not None
    assert view.shares.free()[node].free == (2, 8, 8, 8)
    apply_claim_event(view, "MODIFIED", claim("a-gpu", 6, node, "gpu-0", pod_uid="a"))
    assert view.shares.assumed == {}
    assert view.shares.free()[node].free == (2, 8, 8, 8)
    apply_pod_event(view, "MODIFIED", share_pod("a", 6, node))
    assert view.placement("a") is not None and view.placement("a")[0] == node  # type: ignore[index]
    priorities(view, share_pod("b", 6), SHARE_NODES)
    free = {n: r.free for n, r in view.shares.free().items()}
    assert sum(sum(f) for f in free.values()) == 3 * 32 - 12
    apply_claim_event(view, "DELETED", claim("a-gpu", 6, node, "gpu-0", pod_uid="a"))
    view.forget("b")
    assert all(r.free == (8, 8, 8, 8) for r in view.shares.free().values())


def test_an_unanswered_assumption_lapses(cluster: Any) -> None:
    view = ready_view(cluster, [claim("a-gpu", 2)])
    priorities(view, share_pod("a", 2), SHARE_NODES)
    assert view.shares is not None and len(view.shares.assumed) == 1
    import time

    view.expire(time.monotonic() + 3600)
    assert view.shares.assumed == {}


def half_gpu_layout() -> list[dict[str, Any]]:
    """Node 01 has a GPU with 5 shares free, node 02 one with 4, node 03 none; every other GPU is taken."""
    full = [claim(f"f{n}{g}", 8, node, f"gpu-{g}") for n, node in enumerate(SHARE_NODES) for g in range(3)]
    return [*full, claim("f03", 8, SHARE_NODES[2], "gpu-3"), claim("x", 3, SHARE_NODES[0], "gpu-3"),
            claim("y", 4, SHARE_NODES[1], "gpu-3")]  # fmt: skip


def test_a_configured_trace_is_the_target_of_share_pods_too(cluster: Any) -> None:
    """The pending claims ask half GPUs, but the extender's --trace says the pool runs 5-share pods: a 1-share
    pod on 01 would leave 4 shares no such pod can use, on 02 it takes from a GPU none of them fits already.
    The configured target decides (02), as it does for whole-GPU pods and in the simulator's FGD."""
    claims = [*half_gpu_layout(), *(claim(f"wait{i}", 4) for i in range(4)), claim("p1-gpu", 1)]
    learned = priorities(ready_view(cluster, claims), share_pod("p1", 1), SHARE_NODES)
    assert learned[SHARE_NODES[0]] == wire.MAX_PRIORITY
    trace = Workload.build([0] * 3, [0] * 3, [1] * 3, [625] * 3)
    configured = priorities(ready_view(cluster, claims, trace), share_pod("p1", 1), SHARE_NODES)
    assert configured[SHARE_NODES[1]] == wire.MAX_PRIORITY and configured[SHARE_NODES[0]] < wire.MAX_PRIORITY


def test_a_pod_claiming_several_whole_devices_is_scored_and_assumed_on_them(cluster: Any) -> None:
    """A pod claims two whole GPUs (two devices of all their shares) while a four-GPU claim waits: FGD keeps
    node 01's four free GPUs for it and puts the pod on 02, whose two free GPUs no four-GPU pod can use; 03,
    with one free GPU, cannot take it. The allocator's first two devices with room are assumed the pod's."""
    taken = [claim(f"t{g}", 8, SHARE_NODES[1], f"gpu-{g}") for g in range(2)]
    taken += [claim(f"u{g}", 8, SHARE_NODES[2], f"gpu-{g}") for g in range(3)]
    two = claim("p2-gpu", 8)
    two["spec"] = claim_spec(8, 2)
    four = claim("wait4", 8)
    four["spec"] = claim_spec(8, 4)
    view = ready_view(cluster, [*taken, four, two])
    got = priorities(view, share_pod("p2", 8), SHARE_NODES)
    assert got[SHARE_NODES[1]] == wire.MAX_PRIORITY
    assert got[SHARE_NODES[0]] < wire.MAX_PRIORITY and got[SHARE_NODES[2]] == 0
    assert view.shares is not None and view.shares.assumed["p2"].devices == ("gpu-2", "gpu-3")
    assert view.shares.free()[SHARE_NODES[1]].free == (0, 0, 0, 0)


def test_a_pod_without_gpus_or_claims_is_scored_by_what_its_cpu_does_to_the_shares(cluster: Any) -> None:
    """With shares the scheduler calls the extender for every pod. A CPU pod is filtered nowhere, and scored
    as the simulator's FGD scores it: the target's pods need all but one core of a node, so on 02 or 03 the
    pod's two cores would strand four free GPUs, while 01's CPU is short of that already (a bound pod holds
    1.5 cores): 01 is best, and the pod's CPU is counted there."""
    view = ready_view(cluster, [])
    cap = view.nodes[SHARE_NODES[0]].cpu_milli
    assert all(view.nodes[n].cpu_milli == cap for n in SHARE_NODES)
    view = ready_view(cluster, [], Workload.build([cap - 1000], [0], [1], [1000]))
    busy = share_pod("busy", 1, SHARE_NODES[0])
    del busy["spec"]["resourceClaims"], busy["status"]["resourceClaimStatuses"]
    busy["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1500m", "memory": "1Gi"}}
    apply_pod_event(view, "ADDED", busy)
    pod = share_pod("cpu", 1)
    del pod["spec"]["resourceClaims"], pod["status"]["resourceClaimStatuses"]
    names = ["twin-cpu-1", *SHARE_NODES]
    result = view.filter(wire.parse_args({"pod": pod, "nodenames": names}))
    assert (result.get("nodenames") or result.get("NodeNames")) == names
    got = priorities(view, pod, SHARE_NODES)
    assert got[SHARE_NODES[0]] == wire.MAX_PRIORITY
    assert got[SHARE_NODES[1]] < wire.MAX_PRIORITY and got[SHARE_NODES[2]] < wire.MAX_PRIORITY
    assert view.placement("cpu") is not None and view.placement("cpu")[0] == SHARE_NODES[0]  # type: ignore[index]


def test_the_learned_target_carries_the_cpu_of_the_pods_that_claim(cluster: Any) -> None:
    """Without a trace the target is learned from the claims: each a shape of its shares with the CPU of the pod
    that uses it, once a verb saw that pod (two cores for share_pod's), kept when the claim is allocated."""
    view = ready_view(cluster, [claim("a-gpu", 2), claim("b-gpu", 4)])
    got = priorities(view, share_pod("a", 2), SHARE_NODES)
    assert view.shares is not None

    def shapes() -> list[tuple[int, int]]:
        target = view.shares.target()  # type: ignore[union-attr]
        return sorted(zip(target.gpu_milli.tolist(), target.cpu.tolist(), strict=True))

    assert shapes() == [(250, 2000), (500, 0)]  # b's pod is not seen yet
    node = max(got, key=got.__getitem__)
    apply_claim_event(view, "MODIFIED", claim("a-gpu", 2, node, "gpu-0", pod_uid="a"))
    assert shapes() == [(250, 2000), (500, 0)]


def test_a_share_pod_whose_claim_is_not_listed_yet_is_scored_as_a_cpu_pod(cluster: Any) -> None:
    view = ready_view(cluster, [])
    got = priorities(view, share_pod("early", 2), SHARE_NODES)
    assert view.shares is not None and view.shares.assumed == {}
    assert len(got) == 3


def test_the_dra_shares_stack_renders_the_flag_no_managed_resources_and_no_new_rights() -> None:
    """A FragmentationAware stack with a dra-shares pool: the sidecar gets --dra-shares and the scheduler calls
    it for every pod; the RBAC is the same objects as without shares (the system:kube-scheduler role it is
    bound to reads ResourceSlices and ResourceClaims already)."""
    from infra.scheduling import scheduler_inputs
    from scheduler import compile
    from scheduler.placement import CONFIG_FILE

    def rendered(sharing: Any) -> list[dict[str, Any]]:
        config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"])
        config["gpufleet:cluster"]["kubernetesVersion"] = "1.36"
        config["gpufleet:nodePools"][1]["sharing"] = sharing
        config["gpufleet:scheduling"] = {"placement": {"strategy": "FragmentationAware"}}
        policy, pools = scheduler_inputs(parse_config(config, "shares"))
        return compile(policy, pools)

    def rbac(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            o
            for o in objects
            if o["apiVersion"].startswith("rbac.") and "gpu-binpack" in o["metadata"]["name"]
        ]

    plain_config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    shares, plain = rendered("dra-shares"), rendered(plain_config["gpufleet:nodePools"][1]["sharing"])
    [deployment] = [o for o in shares if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-binpack"]
    [sidecar] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"]
    assert "--dra-shares" in sidecar["args"]
    [config] = [o for o in shares if o["kind"] == "ConfigMap" and CONFIG_FILE in o.get("data", {})]
    [extender] = yaml.safe_load(config["data"][CONFIG_FILE])["extenders"]
    assert extender["managedResources"] == []
    assert rbac(shares) == rbac(plain) and rbac(shares)
    roles = {o["roleRef"]["name"] for o in rbac(shares) if o["kind"] == "ClusterRoleBinding"}
    assert roles == {"system:kube-scheduler", "system:volume-scheduler"}


def test_a_claim_arriving_while_prioritize_waits_for_it_is_used(cluster: Any) -> None:
    """The scheduler has the claim before the view's watch: prioritize waits for it (releasing the view's lock,
    so the watch can deliver it) and then scores the pod's shares."""
    import threading

    view = ready_view(cluster, [])
    started = threading.Event()

    def deliver() -> None:
        started.wait(5)
        apply_claim_event(view, "ADDED", claim("late-gpu", 2))

    thread = threading.Thread(target=deliver)
    thread.start()
    started.set()
    got = priorities(view, share_pod("late", 2), SHARE_NODES)
    thread.join(5)
    assert view.shares is not None and set(view.shares.assumed) == {"late"}
    assert got[SHARE_NODES[0]] == wire.MAX_PRIORITY  # all equal: the first by name


def test_a_pod_claiming_another_class_is_not_kept_waiting(cluster: Any) -> None:
    """A claim of another DeviceClass is in the view: no share pod, and prioritize answers without waiting."""
    import time

    other = claim("gpu0-gpu", 2)
    other["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
    view = ready_view(cluster, [other])
    pod = share_pod("gpu0", 2)
    started = time.monotonic()
    priorities(view, pod, SHARE_NODES)
    assert time.monotonic() - started < CLAIM_WAIT_S  # a wait for the claim would last all of it
    assert view.shares is not None and view.shares.assumed == {}
