"""The dynamic simulator against the real thing (issue "The promise, measured", item 4): the same seeded jobs
over time on the twin (the real Kueue 0.19.2 admitting against the stack's compiled ClusterQueues with
BestEffortFIFO and cohort reclaim, the real scheduler, kwok pods completing after their duration) and through
`scheduler.sim.dynamic`, compared within the bounds `docs/simulation.md` states ("Checked against the twin").

The stack is the metal stack with its H100 pool only (4 nodes of 8 GPUs, every node up: the existing
platform), two teams of 16 GPUs each that may borrow 8 from each other. The load is about 1.4 times what the
32 GPUs serve, so queues form, teams borrow and owners reclaim.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.stackfile import load_stack
from infra.twin.dynamic_replay import compare, replay_on_twin, scaled_trace, simulate, write_trace
from tests.twin.conftest import stack_variant, start_twin
from tests.twin.kube import Kube

JOBS = 200
RATE_PER_S = 1.0
DURATION_S = (5.0, 20.0)
# The bounds this check holds today (docs/simulation.md, "Checked against the twin", has the measured values and
# the reasons). They are wider than a median within 10 % and the same preempted jobs: the simulator reclaims
# lent quota about twice as often as Kueue does (cohort reclamations 99 against 49 in one run; preemptions by
# priority within a team agree, 52 against 45), which is not explained yet; and the twin lags: its admission
# times are whole seconds (a condition's lastTransitionTime), a freed quota is reused only after the Job finishes, its Workload is marked Finished and Kueue retries the queue's heads, and kwok
# starts a pod's duration once it runs; the simulator does all of that in the instant a job ends. Each job holds
# its GPUs a second or two longer on the twin, which is 10-20 % of these 5-20 s jobs, so the twin's queue drains
# more slowly, and which jobs are running (so preemptible) when an owner arrives differs.
MEDIAN_WAIT_S = (
    8.0  # absolute difference of the median wait: medians are a few seconds here, and the twin's own
)
# median moved from 7.9 s to 14.3 s between runs of the same trace
P95_WAIT_BOUND = 0.25  # relative difference of the 95th percentile wait (measured: 12-17 %)
ORDER_BOUND = (
    0.80  # share of job pairs admitted in the same order, pairs more than 2 s apart (measured: 0.88-0.93)
)
PREEMPTED_RATIO = (0.8, 2.5)  # jobs the simulator preempts over those Kueue preempts (measured: 1.4-1.7)
IN_QUEUE_RATIO = (0.6, 1.6)  # the same for preemptions by priority within a team (measured: 1.16)


@pytest.fixture(scope="module")
def replay_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kube, Path]]:
    import yaml

    doc = yaml.safe_load(Path(__file__).parents[2].joinpath("Pulumi.metal.yaml").read_text())
    pools = [p for p in doc["config"]["gpufleet:nodePools"] if p["name"] == "h100"]
    # priority production: a team may label its jobs with classes up to its own (the priority-cap policy)
    teams = [{**t, "quotas": {"h100": t["quotas"]["h100"]}, "priority": "production"}
             for t in doc["config"]["gpufleet:teams"]]  # fmt: skip
    # Kueue's classical preemption, which the simulator models (with fair sharing Kueue admits by dominant
    # resource share and preempts with fairPreemptions: docs/simulation.md, "Not modelled")
    scheduling = {**doc["config"].get("gpufleet:scheduling", {}), "fairSharing": False}
    path = stack_variant(
        tmp_path_factory, "metal", "replay", nodePools=pools, teams=teams, scheduling=scheduling
    )
    twin = start_twin(tmp_path_factory, path)
    try:
        yield Kube.of(twin), path
    finally:
        twin.stop()


def test_the_simulator_agrees_with_kueue_on_the_twin(replay_twin: tuple[Kube, Path], tmp_path: Path) -> None:
    kube, stack = replay_twin
    spec = load_stack(stack)
    jobs = scaled_trace([t.name for t in spec.teams], jobs=JOBS, rate_per_s=RATE_PER_S,
                        duration_s=DURATION_S)  # fmt: skip
    twin = replay_on_twin(kube.kubectl, kube.kubeconfig, jobs)
    trace = write_trace(jobs, tmp_path / "replay.csv", [twin.submitted[j.index] for j in jobs])
    sim = simulate(spec, trace)
    result = compare(twin, sim)
    report = {**result.__dict__, "median_difference": result.median_difference,
              "p95_difference": result.p95_difference, "preempted_ratio": result.preempted_ratio,
              "preempted_jaccard": result.preempted_jaccard, "twin_seconds": twin.seconds}  # fmt: skip
    print("\ndynamic replay:", json.dumps(report, default=list))
    assert result.jobs == JOBS, report
    assert abs(result.sim_median_wait_s - result.twin_median_wait_s) <= MEDIAN_WAIT_S, report
    assert result.p95_difference <= P95_WAIT_BOUND, report
    assert result.order_agreement >= ORDER_BOUND, report
    assert result.twin_preempted, report  # the load makes Kueue preempt: the comparison is not empty
    assert PREEMPTED_RATIO[0] <= result.preempted_ratio <= PREEMPTED_RATIO[1], report
    in_queue = result.sim_reasons.get("InClusterQueue", 0) / max(
        result.twin_reasons.get("InClusterQueue", 0), 1
    )
    assert IN_QUEUE_RATIO[0] <= in_queue <= IN_QUEUE_RATIO[1], report
