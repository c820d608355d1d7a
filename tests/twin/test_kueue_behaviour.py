"""Kueue's behaviour on the twin, as docs/scheduling.md promises it: the real Kueue controller deciding on the
stack's real queues, the real schedulers placing what it admits."""

from __future__ import annotations

import json
from typing import Any

from tests.support import eventually
from tests.twin.kube import Kube, job, name
from tests.twin.test_team_rules import BINPACK, condition, pods_of, workload_of

GPU = "nvidia.com/gpu"
LAYER3 = "topology.k8s.aws/network-node-layer-3"


def bound(kube: Kube, namespace: str, job_name: str, count: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = [p for p in pods_of(kube, namespace, job_name) if p["spec"].get("nodeName")]
        return pods if len(pods) >= count else None

    return list(eventually(ready, f"{count} pods of {job_name} bound", 120))


def test_a_topology_gang_starts_from_zero_nodes_on_one_domain(prod_twin: Kube) -> None:
    """example-prod's EFA pool `h100-train` starts at 0 nodes. Kueue creates a
    ProvisioningRequest for the gang (the flavor's ProvisioningRequest admission check; Kueue docs
    "Provisioning Admission Check"), the autoscaler provisions every node of it at once (the twin's stand-in
    for best-effort-atomic-scale-up), Kueue then admits it with a topology assignment (TAS: "delayed topology
    request" until the nodes exist) and lifts the topology gate: both pods on nodes of one network-node-layer-3
    domain (the podset-required-topology annotation)."""
    member = prod_twin.as_member(("llm-engineers",))
    gang = name("gang")
    ask = {"cpu": "96", "memory": "1000Gi", GPU: 8, "vpc.amazonaws.com/efa": 32}
    annotations = {"kueue.x-k8s.io/podset-required-topology": LAYER3}
    assert member.create(
        job(gang, "team-llm", ask, queue="topology", parallelism=2, annotations=annotations)
    ).ok
    try:
        eventually(
            lambda: condition(workload_of(prod_twin, "team-llm", gang), "Admitted"),
            "the gang's admission",
            120,
        )
        requests = prod_twin.items("provisioningrequests.autoscaling.x-k8s.io", "team-llm")
        assert requests and all(
            any(c["type"] == "Provisioned" and c["status"] == "True" for c in r["status"]["conditions"])
            for r in requests
        )
        # cluster-autoscaler's own reasons: accepted, then scaled up for the whole gang at once, or found room on
        # capacity-block nodes an earlier job left (the group never scales them down)
        for r in requests:
            reasons = {c["type"]: c["reason"] for c in r["status"]["conditions"]}
            assert reasons.get("Accepted") == "Accepted", reasons
            assert reasons.get("Provisioned") in ("CapacityIsProvisioned", "CapacityIsFound"), reasons
        pods = bound(prod_twin, "team-llm", gang, 2)
        domains = {prod_twin.get("node", p["spec"]["nodeName"])["metadata"]["labels"][LAYER3] for p in pods}
        assert len(domains) == 1, domains
        assert len({p["spec"]["nodeName"] for p in pods}) == 2
    finally:
        member.delete("job", gang, "team-llm")


def test_the_lender_reclaims_its_quota_by_preemption(metal_twin: Kube) -> None:
    """vision borrows nlp's idle H100s (quota 16 + 8 borrowed); when nlp submits work within its own quota,
    Kueue preempts vision's borrowing workload to give nlp its nominal quota back (`reclaimWithinCohort: Any`,
    Kueue docs "Preemption": reclaiming quota lent to other ClusterQueues in the cohort)."""
    vision, nlp = metal_twin.as_member(("vision-team",)), metal_twin.as_member(("nlp-team",))
    eight = {"cpu": "8", "memory": "64Gi", GPU: 8}
    borrower, owner = name("borrow"), name("owner")
    assert vision.create(job(borrower, "vision", eight, pod=BINPACK, parallelism=3)).ok  # 24: 8 borrowed
    try:
        eventually(
            lambda: condition(workload_of(metal_twin, "vision", borrower), "Admitted"),
            "the borrower's admission",
        )
        assert nlp.create(job(owner, "nlp", eight, pod=BINPACK, parallelism=2)).ok  # 16: nlp's own quota
        eventually(
            lambda: condition(workload_of(metal_twin, "nlp", owner), "Admitted"), "the owner's admission", 120
        )
        victim = workload_of(metal_twin, "vision", borrower) or {}
        conditions = {c["type"]: c for c in victim.get("status", {}).get("conditions", [])}
        preempted = conditions.get("Preempted") or conditions.get("Evicted")
        assert preempted is not None and preempted["status"] == "True", conditions
        assert "reclaim" in json.dumps(preempted).lower() or preempted.get("reason") in (
            "Preempted",
            "InCohortReclamation",
        )
    finally:
        vision.delete("job", borrower, "vision")
        nlp.delete("job", owner, "nlp")
        eventually(lambda: not workload_of(metal_twin, "vision", borrower), "the borrower to go")


def test_priorities_order_the_queue(metal_twin: Kube) -> None:
    """Within one ClusterQueue (BestEffortFIFO), a higher WorkloadPriorityClass is admitted first when quota frees
    (Kueue docs "Workload Priority Class"; queueingStrategy BestEffortFIFO orders by priority, then creation)."""
    vision = metal_twin.as_member(("vision-team",))
    sixteen = {"cpu": "8", "memory": "64Gi", GPU: 8}  # per pod
    hog, low, high = name("hog"), name("low"), name("high")
    # Fill vision's quota and what it can borrow (24 H100s), so the next two must wait.
    assert vision.create(job(hog, "vision", sixteen, pod=BINPACK, parallelism=3)).ok
    try:
        eventually(
            lambda: condition(workload_of(metal_twin, "vision", hog), "Admitted"), "the hog's admission"
        )
        labels_low = {"kueue.x-k8s.io/priority-class": "preemptible"}
        labels_high = {"kueue.x-k8s.io/priority-class": "default"}
        # 16 GPUs each: once the hog is gone only one of them fits the 24 vision can have.
        assert vision.create(job(low, "vision", sixteen, pod=BINPACK, labels=labels_low, parallelism=2)).ok
        assert vision.create(job(high, "vision", sixteen, pod=BINPACK, labels=labels_high, parallelism=2)).ok
        eventually(
            lambda: workload_of(metal_twin, "vision", low) and workload_of(metal_twin, "vision", high),
            "both Workloads",
        )
        vision.delete("job", hog, "vision")
        eventually(
            lambda: condition(workload_of(metal_twin, "vision", high), "Admitted"),
            "the high-priority admission",
        )
        assert not condition(workload_of(metal_twin, "vision", low), "Admitted")
    finally:
        for j in (hog, low, high):
            vision.delete("job", j, "vision")
