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


def free_domains(kube: Kube) -> dict[str, list[str]]:
    """The EFA pool's nodes with no pod of a team on them, by network-node-layer-3 domain."""
    busy = {p["spec"].get("nodeName") for p in kube.items("pods", "team-llm") if p["status"].get("phase") in
            ("Pending", "Running")}  # fmt: skip
    out: dict[str, list[str]] = {}
    for n in kube.items("nodes", selector="gpufleet.io/pool=h100-train"):
        if n["metadata"]["name"] not in busy:
            out.setdefault(n["metadata"]["labels"][LAYER3], []).append(n["metadata"]["name"])
    return out


def test_a_topology_gang_lands_on_one_domain_among_several(prod_twin: Kube) -> None:
    """example-prod's EFA pool `h100-train` is a capacity block: its nodes stay once added, and their lowest
    network layer alternates between two domains in launch order (twin.nodes), as EC2 spreads instances
    launched together. Three 8-GPU pods first get three nodes through a ProvisioningRequest, which the
    autoscaler provisions at once (the stand-in for best-effort-atomic-scale-up) with cluster-autoscaler's
    reasons; once they are gone, free nodes sit on both domains. A gang of two with the required layer-3
    topology (the podset-required-topology annotation) is then admitted with a topology assignment (Kueue
    TAS) and both pods land on one domain: what Kueue chose, since a placement ignoring the topology could
    split them across the domains the free nodes are on."""
    member = prod_twin.as_member(("llm-engineers",))
    warm, gang = name("warm"), name("gang")
    ask = {"cpu": "96", "memory": "1000Gi", GPU: 8, "vpc.amazonaws.com/efa": 32}
    assert member.create(job(warm, "team-llm", ask, queue="topology", parallelism=3)).ok
    try:
        bound(prod_twin, "team-llm", warm, 3)
        requests = prod_twin.items("provisioningrequests.autoscaling.x-k8s.io", "team-llm")
        for r in requests:
            reasons = {c["type"]: c["reason"] for c in r["status"]["conditions"] if c["status"] == "True"}
            assert reasons.get("Accepted") == "Accepted", reasons
            assert reasons.get("Provisioned") in ("CapacityIsProvisioned", "CapacityIsFound"), reasons
    finally:
        member.delete("job", warm, "team-llm")
    domains = eventually(lambda: (d := free_domains(prod_twin)) and sum(map(len, d.values())) >= 3 and d,
                         "three free nodes of the pool", 60)  # fmt: skip
    assert len(domains) >= 2, domains  # the choice is real: free nodes on more than one domain
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
        pods = bound(prod_twin, "team-llm", gang, 2)
        placed = {prod_twin.get("node", p["spec"]["nodeName"])["metadata"]["labels"][LAYER3] for p in pods}
        assert len(placed) == 1, (placed, domains)
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
