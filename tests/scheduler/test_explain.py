"""The team's view, pure: Kueue's pending messages parsed, the queue order, the pool rows of a team read from
the stack's own compiled ClusterQueues and Cohorts, and the reason chosen for each state a workload can be in.

Kueue's messages are its v0.19.2 format strings filled in (pkg/scheduler/flavorassigner/flavorassigner.go:
228-246, 1349-1368); the twin's real Kueue writes them in tests/twin/test_team_console.py.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from infra.scheduling import scheduler_inputs
from scheduler import compile
from scheduler.explain.events import answer_event
from scheduler.explain.kueue_messages import shortages
from scheduler.explain.order import kueue_order, pending_positions, positions
from scheduler.explain.quota import PoolRow, cohort_parents, team_rows
from scheduler.explain.reasons import Reason, explain
from tests.conftest import load_example
from tests.scheduler.helpers import find, of_kind

GPU = "nvidia.com/gpu"
# As the twin's Kueue wrote them for a member of vision on the metal stack (h100 quota 16 + borrowing 8; no
# quota in the l40s flavor, which Kueue tries too).
L40S = (
    "insufficient quota for nvidia.com/gpu in flavor l40s, previously considered podsets requests (0) + current "
    "podset request (8) > maximum capacity (0)"
)
UNUSED = f"couldn't assign flavors to pod set main: {L40S}, insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"
OVER = (
    "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor h100, previously "
    "considered podsets requests (0) + current podset request (32) > maximum capacity (24), "
    + L40S.replace("(8)", "(32)")
)


@pytest.fixture(scope="module")
def compiled() -> list[dict[str, Any]]:
    return compile(*scheduler_inputs(load_example("metal")))


def with_usage(cq: dict[str, Any], used: int, borrowed: int = 0) -> dict[str, Any]:
    out = copy.deepcopy(cq)
    out["status"] = {"flavorsUsage": [{"name": "h100", "resources": [
        {"name": GPU, "total": str(used), "borrowed": str(borrowed)}]}]}  # fmt: skip
    return out


def rows(compiled: list[dict[str, Any]], vision_used: int, nlp_used: int) -> list[PoolRow]:
    vision = with_usage(find(compiled, "ClusterQueue", "vision"), vision_used, max(0, vision_used - 16))
    nlp = with_usage(find(compiled, "ClusterQueue", "nlp"), nlp_used, max(0, nlp_used - 16))
    others = [q for q in of_kind(compiled, "ClusterQueue") if q["metadata"]["name"] not in ("vision", "nlp")]
    parents = cohort_parents(of_kind(compiled, "Cohort"))
    return team_rows(vision, [vision, nlp, *others], parents)


def workload(
    name: str, *, prio: int = 100, created: str = "2026-01-01T00:00:00Z", **status: Any
) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "vision", "uid": f"uid-{name}", "creationTimestamp": created},
            "spec": {"queueName": "default", "priority": prio}, "status": status}  # fmt: skip


def pending(name: str, message: str, **kw: Any) -> dict[str, Any]:
    cond = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}
    return workload(name, conditions=[cond], **kw)


def test_kueue_messages_parsed_per_flavor() -> None:
    two = UNUSED + "; couldn't assign flavors to pod set workers: " + OVER.split(": ", 1)[1]
    (l40s, a, b, l40s_b) = shortages(two)
    assert (l40s.flavor, l40s.needed, l40s.maximum, l40s.over_maximum) == ("l40s", 8, 0, True)
    assert (a.resource, a.flavor, a.needed, a.over_maximum) == (GPU, "h100", Decimal(8), False)
    assert (b.flavor, b.needed, b.maximum, b.over_maximum) == ("h100", Decimal(8), Decimal(24), True)
    assert l40s_b.flavor == "l40s"
    assert shortages("couldn't assign flavors to pod set main: flavor l40s doesn't match node affinity") == []


def test_kueue_order_priority_then_time_and_eviction_by_a_check_goes_to_the_back() -> None:
    early, late = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
    low = pending("low", UNUSED, prio=10, created=early)
    high = pending("high", UNUSED, prio=100, created=late)
    first = pending("first", UNUSED, prio=100, created=early)
    first["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "AdmissionCheck",
                                          "lastTransitionTime": "2026-01-01T00:10:00Z"})  # fmt: skip
    running = workload("running", conditions=[{"type": "QuotaReserved", "status": "True"}])
    assert [w["metadata"]["name"] for w in kueue_order([low, high, first, running])] == [
        "high",
        "first",
        "low",
    ]
    assert positions([low, high, first, running]) == {"high": 0, "first": 1, "low": 2}


def test_pool_rows_span_the_cohort_tree_of_the_compiled_queues(compiled: list[dict[str, Any]]) -> None:
    (row,) = [r for r in rows(compiled, vision_used=0, nlp_used=24) if r.pool == "h100" and r.resource == GPU]
    assert (row.mine.nominal, row.maximum, row.mine.used) == (16, 24, 0)
    assert row.borrowers == (("nlp", Decimal(8)),)  # each team sits in its own cohort under the stack's
    assert row.cohort_free == 8 and row.lent == 16


def test_each_state_gets_its_reason(compiled: list[dict[str, Any]]) -> None:
    full = rows(compiled, vision_used=16, nlp_used=16)
    borrowed = rows(compiled, vision_used=8, nlp_used=24)
    assert explain(pending("a", UNUSED), full).reason is Reason.QUOTA
    answer = explain(pending("a", UNUSED), borrowed)
    assert answer.reason is Reason.BORROWED and "team nlp is borrowing 8" in answer.says
    assert "reclaimable now" in answer.says
    over = explain(pending("a", OVER), full)
    assert over.reason is Reason.OVER_LIMIT and "asks 32" in over.says and "(24:" in over.says
    low, high = pending("low", UNUSED, prio=10), pending("high", UNUSED, prio=100)
    assert explain(low, full, [low, high]).reason is Reason.PRIORITY
    assert explain(high, full, [low, high]).reason is Reason.QUOTA

    admitted = {"admission": {"clusterQueue": "vision", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "gpu-cores", GPU: "h100"}}]},
                "conditions": [{"type": "QuotaReserved", "status": "True"}]}  # fmt: skip
    checks = [
        {
            "name": "gpufleet-provisioning",
            "state": "Pending",
            "message": "Provisioning Request wasn't provisioned",
        }
    ]
    provisioning = workload("p", **admitted, admissionChecks=checks)
    assert explain(provisioning, full).reason is Reason.PROVISIONING
    pod = {"metadata": {"name": "p-0"}, "spec": {"containers": [{"resources": {"requests": {GPU: "8"}}}]},
           "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": "0/7 nodes are available: 4 Insufficient nvidia.com/gpu."}]}}  # fmt: skip
    frag = explain(workload("f", **admitted), full, pods=[pod])
    assert (
        frag.reason is Reason.FRAGMENTATION and "no node of pool h100 has 8 free GPUs together" in frag.says
    )
    bound = {"metadata": {"name": "r-0"}, "spec": {"nodeName": "gpu-h100-01"}, "status": {}}
    assert explain(workload("r", **admitted), full, pods=[bound]).reason is Reason.RUNNING


def test_the_answer_is_an_event_on_the_workload() -> None:
    wl = pending("a", UNUSED)
    event = answer_event(wl, explain(wl, []))
    assert event["involvedObject"] == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "a",
                                       "namespace": "vision", "uid": "uid-a"}  # fmt: skip
    assert event["metadata"]["namespace"] == "vision" and event["metadata"]["name"].startswith("a.")


def test_positions_from_kueues_visibility_api() -> None:
    """A PendingWorkloadsSummary as the visibility API serves it (apis/visibility/v1beta2/types.go:65-93): the
    position in the ClusterQueue, the one that counts when several LocalQueues feed it."""
    summary = {"kind": "PendingWorkloadsSummary", "apiVersion": "visibility.kueue.x-k8s.io/v1beta2", "items": [
        {"metadata": {"name": "job-a-1", "namespace": "vision"}, "priority": 100, "localQueueName": "default",
         "positionInClusterQueue": 3, "positionInLocalQueue": 0},
        {"metadata": {"name": "job-b-2", "namespace": "vision"}, "priority": 10, "localQueueName": "default",
         "positionInClusterQueue": 5, "positionInLocalQueue": 1}]}  # fmt: skip
    assert pending_positions(summary) == {"job-a-1": 3, "job-b-2": 5}


# Kueue v0.19.2's words: pkg/cache/scheduler/tas_flavor_snapshot.go `notFitMessage`, behind the flavor
# assigner's "couldn't assign flavors to pod set <name>: " (flavorassigner.go).
TOPOLOGY_NONE = (
    "couldn't assign flavors to pod set main: topology \"efa-h100\" doesn't allow to fit any of 4 pod(s)"
)
TOPOLOGY_SOME = (
    'couldn\'t assign flavors to pod set workers: topology "efa-h100" allows to fit only 2 out of 8 slice(s). '
    "Total nodes: 4; excluded: taint: 1"
)


def test_topology_misfits_are_told_apart_from_quota(compiled: list[dict[str, Any]]) -> None:
    free = rows(compiled, vision_used=0, nlp_used=0)
    none = explain(pending("t", TOPOLOGY_NONE), free)
    assert (
        none.reason is Reason.TOPOLOGY
        and "topology efa-h100" in none.says
        and "none of its 4 pods" in none.says
    )
    some = explain(pending("t", TOPOLOGY_SOME), free)
    assert some.reason is Reason.TOPOLOGY and "only 2 of its 8 slices" in some.says
    assert explain(pending("q", UNUSED), free).reason is not Reason.TOPOLOGY


def test_a_workload_evicted_for_pods_not_ready_says_when_it_is_requeued(
    compiled: list[dict[str, Any]],
) -> None:
    """After the eviction Kueue sets Requeued=False (reason PodsReadyTimeout) and `requeueState` until the backoff
    ends (pkg/controller/core/workload_controller.go); then Requeued=True and the usual reasons apply."""
    full = rows(compiled, vision_used=16, nlp_used=16)
    conditions = [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": UNUSED},
        {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout",
         "message": "Exceeded the PodsReady timeout vision/train"},
        {"type": "Requeued", "status": "False", "reason": "PodsReadyTimeout"},
    ]  # fmt: skip
    state = {"count": 2, "requeueAt": "2026-01-01T00:03:00Z"}
    backing_off = workload("b", conditions=conditions, requeueState=state)
    answer = explain(backing_off, full)
    assert answer.reason is Reason.PODS_READY
    assert "requeued at 2026-01-01T00:03:00Z" in answer.says and "evicted 2 times" in answer.says
    conditions[2] = {"type": "Requeued", "status": "True", "reason": "BackoffFinished"}
    assert explain(workload("b", conditions=conditions, requeueState=state), full).reason is Reason.QUOTA


def _held(name: str, check: dict[str, Any], *, required: bool, **status: Any) -> dict[str, Any]:
    """Reserved on the EFA pool, not admitted, its topology assignment delayed: as the twin's Kueue writes it
    (tests/twin/test_team_node_causes.py)."""
    wl = workload(name, admissionChecks=[{"name": "gpufleet-provisioning", **check}],
                  conditions=[{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
                  admission={"clusterQueue": "llm-training-topology", "podSetAssignments": [
                      {"name": "main", "count": 2, "delayedTopologyRequest": "Pending",
                       "flavors": {GPU: "h100-train", "cpu": "h100-train"}}]}, **status)  # fmt: skip
    topology = {"topologyRequest": {"required": "topology.k8s.aws/network-node-layer-3"}} if required else {}
    wl["spec"]["podSets"] = [{"name": "main", "count": 2, **topology}]
    return wl


def _second_pass(wl: dict[str, Any], message: str, at: str) -> dict[str, Any]:
    return {"reason": "SecondPassFailed", "type": "Warning", "message": message, "lastTimestamp": at,
            "involvedObject": {"kind": "Workload", "name": wl["metadata"]["name"], "uid": wl["metadata"]["uid"]}}  # fmt: skip


def test_a_reserved_workload_waits_for_nodes_or_a_domain() -> None:
    """The check's states and the second pass's message, told apart: a misfit names the topology domain only
    for a pod set that requires one; for any other it means the provisioned nodes have not joined yet."""
    ready = {"state": "Ready", "message": "Capacity is found in the cluster"}
    misfit = (
        'couldn\'t assign flavors to pod set main: topology "h100-train" allows to fit only 1 out of 2 pod(s)'
    )
    gang = _held("gang", ready, required=True)
    early = _second_pass(
        gang, "couldn't assign flavors to pod set main: no topology domains at level: x", "T1"
    )
    told = explain(gang, [], events=[early, _second_pass(gang, misfit, "T2")])
    assert told.reason is Reason.TOPOLOGY and "only 1 of its 2 pods fit in any one" in told.says
    assert (
        explain(gang, [], events=[_second_pass(workload("other"), misfit, "T2")]).reason
        is Reason.PROVISIONING
    )
    spread = _held("spread", ready, required=False)
    joined = explain(spread, [], events=[_second_pass(spread, misfit, "T2")])
    assert joined.reason is Reason.PROVISIONING and "once the nodes join" in joined.says
    expired = {
        "state": "Retry",
        "message": "Retrying after booking expired: Capacity reservation time is expired",
    }
    retry = _held("retry", expired, required=False, requeueState={"requeueAt": "2026-01-01T00:01:00Z"})
    answer = explain(retry, [])
    assert (
        answer.reason is Reason.PROVISIONING
        and "asks the autoscaler again at 2026-01-01T00:01:00Z" in answer.says
    )
    gang_retry = _held("gang", expired, required=True, requeueState={"requeueAt": "2026-01-01T00:01:00Z"})
    answer = explain(gang_retry, [], events=[_second_pass(gang_retry, misfit, "T2")])
    assert answer.reason is Reason.TOPOLOGY and "Kueue asks again at 2026-01-01T00:01:00Z" in answer.says
    asked = explain(_held("asked", {"state": "Pending", "message": ""}, required=False), [])
    assert asked.reason is Reason.PROVISIONING and "no answer yet" in asked.says
