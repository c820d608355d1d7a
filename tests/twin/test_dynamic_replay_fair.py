"""The dynamic simulator's fair-sharing path against the real thing: the replay of test_dynamic_replay on a stack
whose Kueue runs fair sharing (the stack's default `fairSharing`: admission by dominant resource share,
`fairPreemptions` with `[LessThanOrEqualToFinalShare, LessThanInitialShare]`), compared within the same
bounds; and the classical algorithm on the same twin record, which misses at least one of them.

The stack is the metal stack's H100 pool (4 nodes of 8 GPUs, every node up) shared by three teams, so that
two can borrow at once and a borrowing team may preempt another borrower (what only fair sharing allows):
vision 12 GPUs, nlp 12 at fair-sharing weight 2, speech 8, each may borrow 8. Every job is one pod of 1-8 GPUs,
no larger than the smallest quota: a gang larger than its team's nominal quota always borrows, and Kueue's
rule S2-b then evicts it for any less-borrowing team while the owner reclaims from that team in turn, a churn
that never lets a 16-GPU gang finish in the simulator (whose evictions are instant). The seed is
`GPUFLEET_REPLAY_SEED` (default 7): docs/simulation.md has the numbers of the seeds run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.stackfile import load_stack
from tests.twin.conftest import stack_variant, start_twin
from tests.twin.kube import Kube
from tests.twin.test_dynamic_replay import (
    DURATION_S,
    GPU_WEIGHTED_BOUND,
    JOBS,
    MEAN_WAIT_BOUND,
    ORDER_BOUND,
    P95_WAIT_BOUND,
    PREEMPTED_JACCARD,
    QUOTA_BOUND,
    RATE_PER_S,
    RECLAIM_RATIO,
)
from twin.dynamic_replay import Comparison, compare, replay_on_twin, scaled_trace, simulate, write_trace

pytestmark = pytest.mark.alone

SEED = int(os.environ.get("GPUFLEET_REPLAY_SEED", "7"))
TEAMS = (("vision", 12, 1.0), ("nlp", 12, 2.0), ("speech", 8, 1.0))
# preemptions Kueue names InCohortFairSharing (rules S2-a and S2-b), the simulator's over the twin's
FAIR_SHARING_RATIO = (0.5, 2.0)
# preemptions by priority within a team: the fair path evicts its own queue's lower-priority work far more often
# than Kueue does (measured 2.8 / 1.6 / 1.2 times on seeds 7-9; docs/simulation.md, "Checked against the twin, fair sharing
# on"), so this one bound is wider than test_dynamic_replay's (0.4, 1.5), which the classical path meets here
FAIR_IN_QUEUE_RATIO = (0.4, 3.5)
# jobs preempted, for the same reason above Kueue's (measured 1.38 / 1.42 / 1.05 on seeds 7-9; the classical
# replay's bound is 0.75-1.4)
FAIR_PREEMPTED_RATIO = (0.75, 1.6)
# GPU-seconds evicted runs had held, the simulator's over the twin's: 1.46 / 0.82 / 2.37 on seeds 7-9 (the
# classical path 1.28 / 0.77 / 2.70: three teams reclaiming from each other lose more than the classical
# replay's two, whose bound is 0.4-1.5)
FAIR_LOST_RATIO = (0.4, 2.5)


@pytest.fixture(scope="module")
def fair_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kube, Path]]:
    import yaml

    doc = yaml.safe_load(Path(__file__).parents[2].joinpath("Pulumi.metal.yaml").read_text())
    pools = [p for p in doc["config"]["gpufleet:nodePools"] if p["name"] == "h100"]
    teams = [{"name": name, "quotas": {"h100": gpus}, "borrowingLimit": 8, "weight": weight,
              "groups": [f"{name}-team"], "priority": "production"} for name, gpus, weight in TEAMS]  # fmt: skip
    scheduling = {k: v for k, v in doc["config"].get("gpufleet:scheduling", {}).items() if k != "fairSharing"}
    path = stack_variant(tmp_path_factory, "metal", "fairreplay", nodePools=pools, teams=teams,
                         scheduling=scheduling)  # fmt: skip
    twin = start_twin(tmp_path_factory, path)
    try:
        yield Kube.of(twin), path
    finally:
        twin.stop()


def bounds(result: Comparison) -> dict[str, bool]:
    """Each bound of the replay (test_dynamic_replay's, reclaims counting fair-sharing preemptions too, the
    preemption counts widened as measured, and the fair-sharing preemptions themselves): whether ``result``
    holds it."""

    def ratio(*reasons: str) -> float:
        twin_n = sum(result.twin_reasons.get(r, 0) for r in reasons)
        return sum(result.sim_reasons.get(r, 0) for r in reasons) / max(twin_n, 1)

    lost = result.sim_lost_gpu_s / max(result.twin_lost_gpu_s, 1e-9)
    reclaim = ratio("InCohortReclamation", "InCohortReclaimWhileBorrowing", "InCohortFairSharing")
    return {
        "mean wait": result.mean_difference <= MEAN_WAIT_BOUND,
        "p95 wait": result.p95_difference <= P95_WAIT_BOUND,
        "GPU-weighted wait": result.gpu_weighted_difference <= GPU_WEIGHTED_BOUND,
        "quota held": result.quota_difference <= QUOTA_BOUND,
        "GPU-seconds lost": FAIR_LOST_RATIO[0] <= lost <= FAIR_LOST_RATIO[1],
        "admission order": result.order_agreement >= ORDER_BOUND,
        "jobs preempted": FAIR_PREEMPTED_RATIO[0] <= result.preempted_ratio <= FAIR_PREEMPTED_RATIO[1],
        "same jobs preempted": result.preempted_jaccard >= PREEMPTED_JACCARD,
        "reclaims": RECLAIM_RATIO[0] <= reclaim <= RECLAIM_RATIO[1],
        "in-queue preemptions": FAIR_IN_QUEUE_RATIO[0] <= ratio("InClusterQueue") <= FAIR_IN_QUEUE_RATIO[1],
        "fair-sharing preemptions": FAIR_SHARING_RATIO[0]
        <= ratio("InCohortFairSharing")
        <= FAIR_SHARING_RATIO[1],
    }


def test_the_fair_sharing_path_agrees_with_kueue_and_the_classical_one_does_not(
    fair_twin: tuple[Kube, Path], tmp_path: Path
) -> None:
    kube, stack = fair_twin
    spec = load_stack(stack)
    assert spec.scheduling.fair_sharing  # the stack's default: the twin's Kueue runs fair sharing
    jobs = scaled_trace([t.name for t in spec.teams], jobs=JOBS, rate_per_s=RATE_PER_S, duration_s=DURATION_S,
                        seed=SEED, gangs=False)  # fmt: skip
    twin = replay_on_twin(kube.binary, kube.kubeconfig, jobs)
    record = json.dumps(twin.__dict__, default=sorted)
    (tmp_path / "twin-record.json").write_text(record)
    print("\ntwin record:", record)  # kept in the log (pytest -s) to re-simulate without the twin
    held = [twin.held(j.index) for j in jobs]
    arrivals = [twin.created[j.index] for j in jobs]
    durations = [h if h is not None else j.duration for h, j in zip(held, jobs, strict=True)]
    trace = write_trace(jobs, tmp_path / "replay.csv", arrivals, durations)
    fair = compare(twin, simulate(spec, trace), jobs)
    classical = compare(twin, simulate(spec, trace, fair_sharing=False), jobs)
    report = {
        "seed": SEED,
        "twin_seconds": twin.seconds,
        **{f"{name}_{k}": v for name, r in (("fair", fair), ("classical", classical)) for k, v in {
            "mean_wait_s": (r.twin_mean_wait_s, r.sim_mean_wait_s), "mean_difference": r.mean_difference,
            "p95_wait_s": (r.twin_p95_wait_s, r.sim_p95_wait_s), "p95_difference": r.p95_difference,
            "gpu_weighted_difference": r.gpu_weighted_difference, "quota_difference": r.quota_difference,
            "order_agreement": r.order_agreement, "preempted": (len(r.twin_preempted), len(r.sim_preempted)),
            "preempted_jaccard": r.preempted_jaccard, "lost_gpu_s": (r.twin_lost_gpu_s, r.sim_lost_gpu_s),
            "reasons": (r.twin_reasons, r.sim_reasons), "bounds": bounds(r)}.items()},
    }  # fmt: skip
    print("\nfair dynamic replay:", json.dumps(report, default=list))
    assert fair.jobs == JOBS, report
    assert fair.twin_reasons.get("InCohortFairSharing"), report  # Kueue did preempt by fair sharing
    assert all(bounds(fair).values()), report
    # the same bounds, the classical path held to them: it misses one the fair path meets
    assert any(not ok for ok in bounds(classical).values()), report
