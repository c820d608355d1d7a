"""GPU shares through DRA on the twin: the real 1.36 apiserver, kube-controller-manager (claims from templates),
kube-scheduler (allocation against the driver-shaped ResourceSlices of twin.dra) and Kueue 0.19.2 (the shares
counted by its deviceClassMappings).

The metal stack on Kubernetes 1.36 with its L40S pool (3 hosts x 4 GPUs) at `sharing: dra-shares` (8 shares
per GPU, 96 in all): vision's quota there is 4 GPUs = 32 shares, borrowing up to 8 GPUs = 64 more; nlp's is 64.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.dra import DRIVER, SHARES, template_name
from scheduler.labels import SHARE_RESOURCE
from tests.support import eventually
from tests.twin.conftest import stack_variant, start_twin
from tests.twin.kube import Kube, job, name
from tests.twin.test_team_rules import BINPACK, condition, pods_of, workload_of


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    import yaml

    from tests.conftest import ROOT

    config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    cluster = {**config["gpufleet:cluster"], "kubernetesVersion": "1.36"}
    pools = config["gpufleet:nodePools"]
    pools[1] = {k: v for k, v in pools[1].items() if k != "sharing"} | {"sharing": "dra-shares"}
    path = stack_variant(tmp_path_factory, "metal", "metal-shares", cluster=cluster, nodePools=pools)
    running = start_twin(tmp_path_factory, path)
    yield Kube.of(running)
    running.stop()


def share_job(job_name: str, namespace: str, shares: int, parallelism: int = 1) -> dict[str, Any]:
    """A Job whose pods each claim `shares` shares of one GPU through the team's rendered template."""
    obj = job(job_name, namespace, {"cpu": "2", "memory": "8Gi"}, pod=dict(BINPACK), parallelism=parallelism)
    spec = obj["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template_name(shares)}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return obj


def charged(wl: dict[str, Any]) -> str:
    [assignment] = wl["status"]["admission"]["podSetAssignments"]
    return str(assignment["resourceUsage"][SHARE_RESOURCE])


def test_a_fractional_job_is_admitted_counted_in_shares_and_placed_on_shared_gpus(twin: Kube) -> None:
    vision = twin.as_member(("vision-team",))
    train = name("frac")
    assert vision.create(share_job(train, "vision", shares=2, parallelism=3)).ok
    wl = eventually(
        lambda: condition(w := workload_of(twin, "vision", train), "Admitted") and w, "admission", 90
    )
    assert charged(wl) == "6"  # 3 pods x 2 shares
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"][SHARE_RESOURCE] == "l40s"

    bound = eventually(
        lambda: (pods if len(pods := [p for p in pods_of(twin, "vision", train) if p["spec"].get("nodeName")]) == 3
                 else None),
        "the three pods to be bound",
        90,
    )  # fmt: skip
    claims = eventually(
        lambda: (
            claims
            if len(
                claims := [
                    c for c in twin.items("resourceclaims", "vision") if c.get("status", {}).get("allocation")
                ]
            )
            >= 3
            else None
        ),
        "the claims to be allocated",
    )
    assert len(bound) == 3 and len(claims) >= 3
    devices = set()
    for claim in claims[:3]:
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == DRIVER and result["device"].startswith("gpu-")
        assert str(result["consumedCapacity"][SHARES]) == "2"
        devices.add((result["pool"], result["device"]))
    # 6 of a GPU's 8 shares: the allocator gives every claim the node's first device with room (the simulator's
    # first-fit share rule, scheduler.fgd.frag.first_fit_gpu), so the three pods share gpu-0
    assert len(devices) == 1 and next(iter(devices))[1] == "gpu-0", devices
    assert {p["spec"]["nodeName"] for p in bound} <= {f"gpu-l40s-0{i}" for i in (1, 2, 3)}

    def shares_in_use() -> str:
        """What vision's ClusterQueue status says it uses of l40s shares (Kueue writes it after admitting)."""
        queue = twin.get("clusterqueues.kueue.x-k8s.io", "vision")
        usage = {r["name"]: str(r["total"]) for f in queue.get("status", {}).get("flavorsUsage", [])
                 if f["name"] == "l40s" for r in f["resources"]}  # fmt: skip
        return usage.get(SHARE_RESOURCE, "")

    eventually(lambda: shares_in_use() == "6", "vision's ClusterQueue to count 6 shares in use", timeout=60)
    vision.delete("job", train, "vision")


def test_a_job_beyond_quota_and_borrowing_waits(twin: Kube) -> None:
    """97 shares: more than vision's 32 plus the 64 it may borrow, so Kueue leaves it pending, never admitted."""
    vision = twin.as_member(("vision-team",))
    big = name("big")
    assert vision.create(share_job(big, "vision", shares=1, parallelism=97)).ok
    wl = eventually(lambda: workload_of(twin, "vision", big), "the Workload")

    def pending_reason() -> str | None:
        w = workload_of(twin, "vision", big) or wl
        for c in w.get("status", {}).get("conditions", []):
            if (
                c["type"] == "QuotaReserved"
                and c["status"] == "False"
                and SHARE_RESOURCE in c.get("message", "")
            ):
                return str(c["message"])
        return None

    message = eventually(pending_reason, "Kueue's reason naming the shares")
    assert not condition(workload_of(twin, "vision", big), "Admitted")
    assert not [p for p in pods_of(twin, "vision", big) if p["spec"].get("nodeName")]
    assert "l40s" in message
    vision.delete("job", big, "vision")


def test_shares_borrowed_from_another_team_are_reclaimed_when_it_asks(twin: Kube) -> None:
    """vision runs 64 shares (32 of them nlp's, lent while idle); nlp then asks for its own 64: Kueue preempts
    vision's borrowing job (reclaimWithinCohort: Any) and admits nlp's, all counted in shares."""
    vision, nlp = twin.as_member(("vision-team",)), twin.as_member(("nlp-team",))
    borrower, owner = name("borrow"), name("reclaim")
    assert vision.create(share_job(borrower, "vision", shares=4, parallelism=16)).ok
    wl = eventually(
        lambda: condition(w := workload_of(twin, "vision", borrower), "Admitted") and w, "borrowing"
    )
    assert charged(wl) == "64"
    assert nlp.create(share_job(owner, "nlp", shares=4, parallelism=16)).ok
    eventually(
        lambda: condition(workload_of(twin, "vision", borrower), "Evicted"), "the borrower's eviction", 90
    )
    evicted = workload_of(twin, "vision", borrower) or {}
    reasons = {c["type"]: c.get("reason") for c in evicted["status"]["conditions"]}
    assert reasons.get("Preempted") == "InCohortReclamation", reasons
    got = eventually(
        lambda: condition(w := workload_of(twin, "nlp", owner), "Admitted") and w, "the owner", 90
    )
    assert charged(got) == "64"
    vision.delete("job", borrower, "vision")
    nlp.delete("job", owner, "nlp")


def test_the_docs_share_example_runs_as_written_on_a_share_pool(twin: Kube) -> None:
    """docs/scheduling.md's Job that claims GPU shares, submitted as the page writes it (its namespace the one of
    this twin's team): Kueue admits it in shares and its pods are bound with their claims allocated."""
    from tests.twin.test_docs_workloads import SCHEDULING, claim_examples, run_example_as

    [example] = claim_examples(SCHEDULING)
    example = {**example, "metadata": {**example["metadata"], "namespace": "vision"}}
    wl = run_example_as(twin, twin.as_member(("vision-team",)), example)
    assert charged(wl) == str(2 * example["spec"]["parallelism"])
