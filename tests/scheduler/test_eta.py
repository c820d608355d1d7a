"""`eta`, pure: duration hints and the team's history, the live state seeded into the dynamic simulator (the
metal stack's own compiled ClusterQueues: h100 is 4 hosts x 8 GPUs, vision and nlp 16 each, borrowing up to
8), and starts that can be worked out by hand on that cluster."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from infra.scheduling import scheduler_inputs
from scheduler import compile
from scheduler.explain.durations import (
    CAUGHT,
    HINT,
    NO_HISTORY_S,
    Finished,
    HintError,
    Remaining,
    draw,
    finished_jobs,
    history_for,
    holding_lag,
    parse_duration,
    remaining_of,
)
from scheduler.explain.eta import MAX_ARRIVALS, arrivals, estimate, start_in
from scheduler.explain.quota import cohort_parents
from scheduler.explain.seed import Everyone, Live, SeedError, manifest_entry, rate_of, seed
from tests.conftest import load_example
from tests.scheduler.helpers import of_kind

GPU = "nvidia.com/gpu"
NOW = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def compiled() -> list[dict[str, Any]]:
    return compile(*scheduler_inputs(load_example("metal")))


def queues(compiled: list[dict[str, Any]], nlp_used: int = 0, nlp_pending: int = 0,
           nlp_holding: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    out = copy.deepcopy(of_kind(compiled, "ClusterQueue"))
    nlp = next(q for q in out if q["metadata"]["name"] == "nlp")
    nlp["status"] = {"pendingWorkloads": nlp_pending, "reservingWorkloads": nlp_holding,
                     "admittedWorkloads": nlp_holding,
                     "flavorsUsage": [{"name": "h100", "resources": [{"name": GPU, "total": str(nlp_used)}]}]}  # fmt: skip
    return out


def job(name: str, *, hint: str | None = None, deadline: int | None = None, ran: tuple[float, float] | None = None,
        gpus: int = 8, pods: int = 1) -> dict[str, Any]:  # fmt: skip
    """A batch Job of vision; `ran`: (started, completed) seconds ago."""
    out: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "vision", "uid": f"job-{name}",
                     "annotations": {HINT: hint} if hint else {}},
        "spec": {"parallelism": pods, "template": {"spec": {"nodeSelector": {"gpufleet.io/pool": "h100"},
                 "containers": [{"name": "m", "resources": {"requests": {GPU: str(gpus)}}}]}}},
    }  # fmt: skip
    if deadline is not None:
        out["spec"]["activeDeadlineSeconds"] = deadline
    if ran is not None:
        out["status"] = {"startTime": stamp(ran[0]), "completionTime": stamp(ran[1])}
    return out


def workload(owner: dict[str, Any], *, prio: int = 100, admitted_ago: float | None = None,
             created_ago: float = 60) -> dict[str, Any]:  # fmt: skip
    """The Workload Kueue makes of `owner`; admitted to h100 `admitted_ago` seconds ago, else waiting."""
    spec = owner["spec"]
    status: dict[str, Any] = {"conditions": []}
    if admitted_ago is not None:
        status["conditions"] = [{"type": t, "status": "True", "lastTransitionTime": stamp(admitted_ago)}
                                for t in ("QuotaReserved", "Admitted")]  # fmt: skip
        status["admission"] = {"clusterQueue": "vision",
                               "podSetAssignments": [{"name": "main", "flavors": {GPU: "h100", "cpu": "gpu-cores"}}]}  # fmt: skip
    else:
        status["conditions"] = [{"type": "QuotaReserved", "status": "False", "message": "insufficient"}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"job-{owner['metadata']['name']}", "namespace": "vision",
                     "uid": f"wl-{owner['metadata']['name']}", "creationTimestamp": stamp(created_ago),
                     "ownerReferences": [{"kind": "Job", "name": owner["metadata"]["name"],
                                          "uid": owner["metadata"]["uid"], "controller": True}]},
        "spec": {"queueName": "default", "priority": prio,
                 "podSets": [{"name": "main", "count": spec["parallelism"], "template": spec["template"]}]},
        "status": status,
    }  # fmt: skip


def live(compiled: list[dict[str, Any]], jobs: list[dict[str, Any]], workloads: list[dict[str, Any]],
         *, nlp_used: int = 0, nlp_pending: int = 0, nlp_holding: int = 0,
         nodes: list[dict[str, Any]] | None = None) -> Live:  # fmt: skip
    classes = {
        str(c["metadata"]["name"]): int(c["value"]) for c in of_kind(compiled, "WorkloadPriorityClass")
    }
    return Live(
        namespace="vision",
        local_queues={"default": "vision", "cpu": "vision-cpu"},
        cluster_queues=queues(compiled, nlp_used, nlp_pending, nlp_holding),
        cohort_parents=cohort_parents(of_kind(compiled, "Cohort")),
        flavors=of_kind(compiled, "ResourceFlavor"),
        nodes=nodes,
        workloads=workloads,
        jobs=jobs,
        priority_classes=classes,
        now=NOW,
    )


def test_duration_hints_parse_as_go_durations_or_seconds() -> None:
    assert parse_duration("1h30m") == 5400 and parse_duration("45s") == 45 and parse_duration("5400") == 5400
    assert parse_duration("2d") == 172800 and parse_duration("1.5h") == 5400
    with pytest.raises(HintError, match=f"annotation {HINT}: 'soon' is not a duration"):
        parse_duration("soon")
    with pytest.raises(HintError):
        parse_duration("1h30")


def test_remaining_time_from_hint_then_deadline_then_history() -> None:
    assert remaining_of(job("a", hint="10m", deadline=60), elapsed=120) == Remaining(480, "hint", 120)
    assert remaining_of(job("a", deadline=600), elapsed=100) == Remaining(500, "deadline", 100)
    assert remaining_of(job("a"), elapsed=100).known is None
    rng = np.random.default_rng(0)
    # residual life: only durations longer than what it has run, less that
    draws = {draw(Remaining(None, "history", 100), [50, 150, 400], rng) for _ in range(50)}
    assert draws == {50.0, 300.0}
    # it has outlasted every finished job: up to as long again as it has run
    assert all(0 <= draw(Remaining(None, "history", 500), [50, 150], rng) <= 500 for _ in range(20))
    assert draw(Remaining(None, "history", 0), [], rng) == NO_HISTORY_S


def test_history_is_the_teams_similar_finished_jobs_when_there_are_enough() -> None:
    done = [job(f"h{i}", ran=(1000 - i, 1000 - i - 100 - i), gpus=8) for i in range(6)]
    done.append(job("odd", ran=(50, 10), gpus=1))
    history = finished_jobs([*done, job("running")])
    assert len(history) == 7 and history[-1].seconds == 40  # the most recent last; a running job is not one
    similar, narrowed = history_for(history, "h100", 8)
    assert narrowed and sorted(similar) == [100 + i for i in range(6)]
    everything, narrowed = history_for(history, "h100", 16)
    assert not narrowed and len(everything) == 7


def test_seeding_reads_nodes_when_it_may_and_says_what_it_assumed(compiled: list[dict[str, Any]]) -> None:
    running, waiting = job("run", hint="10m", pods=2), job("next")
    wls = [workload(running, admitted_ago=60), workload(waiting)]
    blind = seed(live(compiled, [running, waiting], wls, nlp_used=12, nlp_pending=3))
    assert blind.pools["h100"] == (8, 8, 8, 8)  # the cohort's quota, 16 + 16, on nodes of 8
    assert blind.pools["l40s"] == (8, 8, 8)  # shares: vision 8 + nlp 16 of nvidia.com/gpu.shared
    assert any("your access may not list them" in a for a in blind.assumed)
    assert any("nlp 12 GPUs" in a for a in blind.assumed)
    assert blind.unseen and "queue nlp has 3 waiting jobs of another team" in blind.unseen[0]
    assert "taken as 3 jobs of 8 GPUs" in blind.unseen[0]  # vision's usual pod: 8 GPUs
    names = [e.name for e in blind.entries]
    waiting_others = [f"other/nlp/waiting/{i}" for i in range(3)]
    assert names == ["job-run", "other/nlp/h100/0", "other/nlp/h100/1", *waiting_others, "job-next"]
    assert {e.pools for e in blind.entries[3:6]} == {("h100",)}  # where nlp's running work is
    run = blind.entries[0]
    assert (run.pool, run.pods, run.units, run.remaining.known) == ("h100", 2, 8, 540)
    assert [e.units for e in blind.entries[1:3]] == [8, 4]
    assert blind.entries[6].pools == ("h100",) and blind.entries[6].remaining.source == "history"
    assert blind.settings.reclaim_within_cohort and not blind.settings.autoscale

    nodes = [{"metadata": {"name": f"n{i}", "labels": {"gpufleet.io/pool": "h100"}},
              "status": {"allocatable": {GPU: "4"}}} for i in range(3)]  # fmt: skip
    nodes.append({"metadata": {"name": "cordoned", "labels": {"gpufleet.io/pool": "h100"}},
                  "spec": {"unschedulable": True}, "status": {"allocatable": {GPU: "8"}}})  # fmt: skip
    seen = seed(live(compiled, [running, waiting], wls, nodes=nodes))
    assert seen.pools["h100"] == (4, 4, 4) and seen.pools["l40s"] == ()
    assert not any("nodes" in a for a in seen.assumed)


def test_the_wait_is_until_quota_frees_for_it(compiled: list[dict[str, Any]]) -> None:
    """Pool full: vision runs 16 (ends in 600 s), nlp 16 (whenever it ends: vision may borrow only 8). vision's
    16-GPU job starts when its own job ends and frees quota, after Kueue's 1 s requeue batch; with a production
    job of 16 GPUs ahead (300 s) it waits for that one too."""
    history_jobs = [job(f"h{i}", ran=(5000, 4000)) for i in range(5)]  # five 1000 s runs of 8 GPUs on h100
    running, waiting = job("run", hint="10m", pods=2), job("next", hint="1h", pods=2)
    wls = [workload(running, admitted_ago=0), workload(waiting)]
    state = seed(live(compiled, [*history_jobs, running, waiting], wls, nlp_used=16))
    found = estimate(state, state.index("job-next"), finished_jobs(history_jobs))
    assert found.p50_s is not None and 600 <= found.p50_s <= 602 and found.p50_s == found.p90_s

    urgent = job("urgent", hint="5m", pods=2)
    wls.append(workload(urgent, prio=1000, created_ago=1))
    state = seed(live(compiled, [*history_jobs, running, waiting, urgent], wls, nlp_used=16))
    assert [e.name for e in state.entries][-2:] == ["job-urgent", "job-next"]  # Kueue's order: priority first
    found = estimate(state, state.index("job-next"), finished_jobs(history_jobs))
    assert found.p50_s is not None and 600 + 300 <= found.p50_s <= 600 + 300 + 3


def test_the_accuracy_benchmark_counts_an_estimate_from_the_moment_eta_took_as_now(
    compiled: list[dict[str, Any]],
) -> None:
    """`eta` counts its seconds from `Live.now`, taken once its reads are over (a running job's time left is
    its hint less what it has run by then), so a run's start is that moment plus the p50, however long the
    reads took: benchmarks/eta_accuracy.py scores it so, not from when the reads began. Here the reads began
    4 s before `now` and the job is created 3 s after it; the running job admitted at `now` frees its quota
    600 s later, on the benchmark's clock at 604 s."""
    from benchmarks.eta_accuracy import predicted

    history_jobs = [job(f"h{i}", ran=(5000, 4000)) for i in range(5)]
    running, waiting = job("run", hint="10m", pods=2), job("next", hint="1h", pods=2)
    state = seed(live(compiled, [*history_jobs, running, waiting],
                      [workload(running, admitted_ago=0), workload(waiting)], nlp_used=16))  # fmt: skip
    found = estimate(state, state.index("job-next"), finished_jobs(history_jobs))
    row = {"asked": 0.0, "now": 4.0, "asked_full": 4.0, "full_now": 7.0, "submitted": 7.0,
           "p50_s": found.p50_s, "full_p50_s": found.p50_s}  # fmt: skip
    assert 604 <= predicted(row, "p50_s") <= 606  # the quota frees at 604 s, Kueue requeues within 1 s
    assert 607 <= predicted(row, "full_p50_s", "full_") <= 609  # the full view read 3 s later: 3 s later
    # rows recorded before `now` was kept: the member's reads end where the full view's begin, its at the create
    old = {k: v for k, v in row.items() if not k.endswith("now")}
    assert predicted(old, "p50_s") == predicted(row, "p50_s")
    assert predicted(old, "full_p50_s", "full_") == predicted(row, "full_p50_s", "full_")


def test_hinted_jobs_hold_their_quota_as_much_longer_as_the_teams_finished_hinted_jobs_did() -> None:
    """The lag is learnt from finished jobs that carried a hint (the median of run less hint, never below 0);
    jobs without a hint say nothing of it."""
    done = finished_jobs([job("a", hint="60s", ran=(200, 130)), job("b", hint="60s", ran=(300, 236)),
                          job("c", hint="1m", ran=(400, 335)), job("d", ran=(500, 100))])  # fmt: skip
    assert [f.hint for f in done] == [60.0, 60.0, 60.0, None]  # by when they ended
    assert holding_lag(done) == 5.0  # runs of 70, 64 and 65 s against 60
    assert holding_lag(finished_jobs([job("e", hint="90s", ran=(100, 20))])) == 0.0  # ran shorter: no lag
    assert holding_lag(finished_jobs([job("d", ran=(500, 100))])) == 0.0
    rng = np.random.default_rng(0)
    assert draw(Remaining(30.0, "hint"), [], rng, lag=5.0) == 35.0
    assert draw(Remaining(30.0, "deadline"), [], rng, lag=5.0) == 30.0  # a deadline bounds the whole hold


def test_the_wait_counts_the_quota_a_hinted_job_holds_beyond_its_hint(compiled: list[dict[str, Any]]) -> None:
    """The wait of test_the_wait_is_until_quota_frees_for_it, where the team's finished hinted jobs held their
    quota 20 s beyond their hints: the running job's quota frees 20 s after its hint says, and the answer says
    what was assumed."""
    history_jobs = [job(f"h{i}", hint="1000s", ran=(5000, 3980)) for i in range(5)]  # 1020 s held each
    running, waiting = job("run", hint="10m", pods=2), job("next", hint="1h", pods=2)
    wls = [workload(running, admitted_ago=0), workload(waiting)]
    state = seed(live(compiled, [*history_jobs, running, waiting], wls, nlp_used=16))
    found = estimate(state, state.index("job-next"), finished_jobs(history_jobs))
    assert found.p50_s is not None and 620 <= found.p50_s <= 622
    assert any("hold its quota 20 s beyond it" in a for a in found.assumed), found.assumed


def test_unknown_times_give_a_spread_and_say_so(compiled: list[dict[str, Any]]) -> None:
    history_jobs = [job(f"h{i}", ran=(9000, 9000 - d)) for i, d in enumerate((100, 300, 900, 2700, 8100))]
    running, waiting = job("run", pods=2), job("next")  # no hints
    wls = [workload(running, admitted_ago=50), workload(waiting)]
    state = seed(live(compiled, [*history_jobs, running, waiting], wls, nlp_used=16))
    target = state.index("job-next")
    found = estimate(state, target, finished_jobs(history_jobs), runs=30)
    assert found.p50_s is not None and found.p90_s is not None and found.p50_s < found.p90_s
    assert found.p90_s <= 8100  # no draw runs longer than the longest finished job
    assert any(
        "1 running job without a duration hint" in a and "last 5 finished jobs" in a for a in found.assumed
    )
    # one run with the times fixed: vision's job ends at 400, nlp's at 5000; when nlp's end first, vision's
    # next job borrows their quota at once (after the 1 s requeue batch)
    assert 400 <= (start_in(state, target, [400.0, 5000.0, 5000.0, 1.0]) or 0) <= 402
    assert 5 <= (start_in(state, target, [400.0, 5.0, 5000.0, 1.0]) or 0) <= 7


def test_a_manifest_is_seeded_as_kueue_would_queue_it(compiled: list[dict[str, Any]]) -> None:
    state = live(compiled, [], [])
    manifest = job("dry", gpus=4, pods=3)
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "production"}
    entry = manifest_entry(manifest, state)
    assert (entry.queue, entry.pools, entry.pods, entry.units, entry.priority) == (
        "vision",
        ("h100",),
        3,
        4,
        1000,
    )
    found = estimate(seed(state, entry), len(seed(state, entry).entries) - 1, [])
    assert found.p50_s is not None and found.p50_s < 1  # an empty pool: at once
    bad = [({"kind": "Deployment", "apiVersion": "apps/v1"}, "kind 'Deployment' is not supported"),
           ({**manifest, "metadata": {"labels": {"kueue.x-k8s.io/priority-class": "urgent"}}},
            "priority class 'urgent' is not defined (accepted: default, preemptible, production)"),
           ({**manifest, "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "gpu"}}}, "LocalQueue 'gpu'"),
           (job("nogpu", gpus=0), "ask no GPUs")]  # fmt: skip
    for obj, said in bad:
        with pytest.raises(SeedError, match=said.replace("(", r"\(").replace(")", r"\)")):
            manifest_entry(obj, state)
    with pytest.raises(HintError):
        manifest_entry(job("x", hint="tomorrow"), state)


def test_history_entries_are_finished_only() -> None:
    assert finished_jobs([job("r")]) == []
    assert finished_jobs([job("d", ran=(100, 40))]) == [Finished(60.0, "h100", 8, stamp(40))]


def test_without_finished_jobs_the_teams_hints_stand_in_for_unknown_runs(
    compiled: list[dict[str, Any]],
) -> None:
    """vision has no finished job: nlp's 16 GPUs (unreadable, two blocks of 8) are caught partway through runs
    drawn from vision's own hinted runs (900 s and 300 s), not an hour, and the answer says so: vision's next 8
    GPUs borrow the first block nlp frees, never later than vision's own run's end at 900 s; with no hint
    either, an hour stands in."""
    running, waiting = job("run", hint="15m", pods=2), job("next", hint="5m")
    wls = [workload(running, admitted_ago=0), workload(waiting)]
    state = seed(live(compiled, [running, waiting], wls, nlp_used=16))
    target = state.index("job-next")
    found = estimate(state, target, [], runs=30)
    assert found.p50_s is not None and found.p90_s is not None
    # the first of two residuals of these runs has a median near 200 s; of an hour's, over 900 s
    assert found.p50_s <= 450 and found.p90_s <= 902
    assert any("partway through runs as long as your team's 2 jobs with a hint (median 10 min)" in a
               for a in found.assumed)  # fmt: skip

    blind = [job("run"), job("next", pods=2)]
    state = seed(live(compiled, blind, [workload(blind[0], admitted_ago=0), workload(blind[1])], nlp_used=16))
    found = estimate(state, state.index("job-next"), [], runs=20)
    # vision's 8 GPUs run an hour; next borrows the first of nlp's blocks to end, caught within an hour's run
    assert (
        found.p50_s is not None
        and found.p90_s is not None
        and 600 <= found.p50_s < found.p90_s <= NO_HISTORY_S
    )
    assert any("partway through runs of 60 min" in a for a in found.assumed)


def submitted_job(name: str, ago: float, *, hint: str = "60s", gpus: int = 1) -> dict[str, Any]:
    """A Job of vision created `ago` seconds before now."""
    out = job(name, hint=hint, gpus=gpus)
    out["metadata"]["creationTimestamp"] = stamp(ago)
    return out


def test_the_submission_rate_counts_the_jobs_after_the_oldest_over_the_time_since_it() -> None:
    assert rate_of([50.0, 0.0, 25.0]) == pytest.approx(2 / 50)
    assert rate_of([10.0, 5.0]) == 0.0  # too few to learn a rate from


def test_a_stream_of_small_later_jobs_delays_a_large_borrowing_one(compiled: list[dict[str, Any]]) -> None:
    """vision runs 8 GPUs for 100 s and asks for 24 (its 16 and 8 borrowed from idle nlp): alone it starts when
    its running job ends. Its team submitted a 1-GPU job of 60 s every ~5.6 s over the last 50 s; under
    BestEffortFIFO each later one fits beside the running job and is admitted while the large one waits, so
    the large one starts later."""
    running = job("run", hint="100s")
    recent = [submitted_job(f"s{i}", 50 - 5 * i) for i in range(10)]  # 9 after the oldest, over 50 s
    big = job("big", hint="10m", pods=3)
    alone = seed(live(compiled, [running], [workload(running, admitted_ago=0)]), None)
    state_alone = seed(live(compiled, [running], [workload(running, admitted_ago=0)]),
                       manifest_entry(big, live(compiled, [running], [])))  # fmt: skip
    assert not alone.streams and not state_alone.streams
    assert any(
        "later submissions: none modelled (your team submitted 0 jobs" in a for a in state_alone.assumed
    )
    without = estimate(state_alone, len(state_alone.entries) - 1, [], runs=5)
    assert without.p50_s is not None and 100 <= without.p50_s <= 102 and without.runs == 1

    now = live(compiled, [running, *recent], [workload(running, admitted_ago=0)])
    state = seed(now, manifest_entry(big, now))
    (stream,) = state.streams  # nlp shows no work: no stream of its own
    assert stream.rate_per_s == pytest.approx(9 / 50)
    assert {(s.queue, s.pools, s.pods, s.units, s.remaining.known) for s in stream.shapes} == {
        ("vision", ("h100",), 1, 1, 60.0)
    }
    assert stream.horizon_s == 50.0  # as long again as the rate has been seen
    assert any("your team's 10 jobs of the last 50 s (one every 6 s) go on for as long again" in a
               for a in state.assumed)  # fmt: skip
    found = estimate(state, len(state.entries) - 1, [], runs=10)
    assert found.runs == 10
    # it needs all of vision's 24 (16 and 8 borrowed): it starts once the last small job of the stream's 50 s
    # ends, 60 s after it arrived (and Kueue's 1 s requeue batch)
    assert found.p50_s is not None and found.p90_s is not None
    assert without.p50_s + 1 < found.p50_s <= found.p90_s <= 50 + 60 + 2


def test_other_teams_are_given_jobs_as_fast_as_their_queues_finish_them(
    compiled: list[dict[str, Any]],
) -> None:
    """vision submitted one 8-GPU job of 60 s every 10 s (0.1 a second); nlp, whose jobs vision cannot read,
    holds quota with 3 Workloads: by Little's law it finishes, and over time is given, 3 jobs every 60 s
    (vision's mean run), not vision's rate however the quotas compare."""
    recent = [submitted_job(f"s{i}", 40 - 10 * i, gpus=8) for i in range(5)]  # 4 after the oldest, over 40 s
    now = live(compiled, recent, [], nlp_used=12, nlp_holding=3)
    nlp_status = next(q for q in now.cluster_queues if q["metadata"]["name"] == "nlp")["status"]
    nlp_status["flavorsUsage"].append(
        {"name": "gpu-cores", "resources": [{"name": "memory", "total": "8Gi"}]}
    )
    state = seed(now)
    mine, nlp = state.streams
    assert (mine.name, nlp.name) == ("vision", "nlp")
    assert mine.rate_per_s == pytest.approx(0.1) and nlp.rate_per_s == pytest.approx(3 / 60)
    assert nlp.horizon_s == mine.horizon_s == 40.0
    assert {(s.queue, s.pools, s.units) for s in nlp.shapes} == {("nlp", ("h100",), 8)}
    assert any("other teams' queues holding quota (nlp 3 jobs) are taken to be given jobs like yours as fast "
               "as they finish them: that many every 60 s, your team's mean run" in a for a in state.assumed)  # fmt: skip

    # finished jobs say how long a run is, before any hint: 3 jobs every 120 s
    done = [job(f"d{i}", ran=(300 + 10 * i, 180 + 10 * i)) for i in range(2)]
    assert seed(live(compiled, [*recent, *done], [], nlp_used=12, nlp_holding=3)).streams[1].rate_per_s == (
        pytest.approx(3 / 120)
    )
    # a queue that only waits finishes nothing: its waiting jobs are seeded, no later ones drawn for it
    (only,) = seed(live(compiled, recent, [], nlp_pending=4)).streams
    assert only.name == "vision"


def test_other_teams_running_work_is_as_many_jobs_as_hold_their_quota(compiled: list[dict[str, Any]]) -> None:
    """nlp's 12 GPUs held by 3 Workloads become three jobs of 4 that end apart; by one, no block over a node's
    8; with no count, blocks of 8."""
    for holding, units in ((3, [4, 4, 4]), (1, [6, 6]), (0, [8, 4]), (20, [1] * 12)):
        state = seed(live(compiled, [], [], nlp_used=12, nlp_holding=holding))
        others = [e for e in state.entries if e.name.startswith("other/nlp/h100/")]
        assert [e.units for e in others] == units and {(e.pool, e.pods) for e in others} == {("h100", 1)}


def test_every_run_draws_its_own_arrivals_over_the_horizon(compiled: list[dict[str, Any]]) -> None:
    recent = [submitted_job(f"s{i}", 40 - 10 * i) for i in range(5)]
    (stream,) = seed(live(compiled, recent, [])).streams
    first, again, other = (arrivals([stream], [], [], np.random.default_rng([r, 1])) for r in (0, 0, 1))
    assert [t for t, _, _ in first] == [t for t, _, _ in again] != [t for t, _, _ in other]
    times = [t for t, _, _ in first]
    assert times == sorted(times) and times[-1] <= stream.horizon_s == 40.0
    assert all(run == 60.0 and e.name.startswith("later/vision/") for _, e, run in first)
    long = replace(stream, horizon_s=10**6)  # 0.1 a second for ~11 days: capped
    times = [t for t, _, _ in arrivals([long], [], [], np.random.default_rng([0, 1]))]
    assert len(times) == MAX_ARRIVALS and 8 < float(np.mean(np.diff([0.0, *times]))) < 12  # gaps of mean 10 s


def test_other_teams_running_jobs_are_caught_partway_through() -> None:
    """A look falls in a long run more often than in a short one, so what is left of a run caught running has
    the residual-life law, mean E[D^2] / (2 E[D]): 21.75 s for runs uniform in 20-60 s, not their 40 s; the
    asking team's own running job keeps its elapsed time, and another team's waiting job a whole run."""
    runs = list(np.linspace(20.0, 60.0, 41))
    expected = sum(d * d for d in runs) / (2 * sum(runs))
    rng = np.random.default_rng(7)
    caught = [draw(Remaining(None, CAUGHT), runs, rng) for _ in range(4000)]
    assert abs(float(np.mean(caught)) - expected) < 1.0 and min(caught) >= 0.0 and max(caught) <= 60.0
    assert float(np.mean(caught)) < 30.0  # whole runs would average 40 s
    assert float(np.mean([draw(Remaining(None, "others"), runs, rng) for _ in range(2000)])) > 38.0
    assert min(draw(Remaining(None, "history", 30.0), runs, rng) for _ in range(200)) > 0.0
    assert max(draw(Remaining(None, "history", 30.0), runs, rng) for _ in range(200)) <= 30.0
    without = [draw(Remaining(None, CAUGHT), [], rng) for _ in range(2000)]
    assert max(without) <= NO_HISTORY_S and abs(float(np.mean(without)) - NO_HISTORY_S / 2) < 100.0


def test_a_job_waiting_for_other_teams_running_work_starts_at_its_residual(
    compiled: list[dict[str, Any]],
) -> None:
    """vision's pool share is held by its own 16-GPU job (hint 1 h); its next 8 GPUs borrow the first block of
    nlp's 16 (two jobs, unreadable) to end. vision's history is five 1000 s runs, so each of nlp's jobs, caught
    running, has a uniform 0-1000 s left: the first of two ends at 333 s on average, a median of 293 s, not
    1000 s as if they had just started."""
    history_jobs = [job(f"h{i}", ran=(5000, 4000)) for i in range(5)]
    running, waiting = job("run", hint="1h", pods=2), job("next", hint="5m")
    wls = [workload(running, admitted_ago=0), workload(waiting)]
    state = seed(live(compiled, [*history_jobs, running, waiting], wls, nlp_used=16, nlp_holding=2))
    assert {e.remaining.source for e in state.entries if e.name.startswith("other/nlp/h100/")} == {CAUGHT}
    found = estimate(state, state.index("job-next"), finished_jobs(history_jobs), runs=40)
    assert found.p50_s is not None and found.p90_s is not None
    assert 150 <= found.p50_s <= 450 and found.p90_s <= 1000


def of_nlp(obj: dict[str, Any]) -> dict[str, Any]:
    """A Job or Workload of vision's helpers, as nlp's (namespace nlp, LocalQueue default -> ClusterQueue nlp)."""
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = "nlp"
    if "admission" in out.get("status", {}):
        out["status"]["admission"]["clusterQueue"] = "nlp"
    return out


def pod_of(owner: dict[str, Any], node: str, i: int = 0) -> dict[str, Any]:
    """A running pod of Job `owner`, bound to `node`."""
    meta = owner["metadata"]
    return {"metadata": {"name": f"{meta['name']}-{i}", "namespace": meta["namespace"],
                         "ownerReferences": [{"kind": "Job", "name": meta["name"], "uid": meta["uid"]}]},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}  # fmt: skip


def full_view(
    team: Live,
    workloads: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]] | None = None,
) -> Live:
    """`team` as the platform team reads it: every namespace's Workloads, Jobs and pods besides."""
    lqs = {"vision": dict(team.local_queues), "nlp": {"default": "nlp"}}
    return replace(
        team, everyone=Everyone(lqs, [*team.workloads, *workloads], [*team.jobs, *jobs], pods or [])
    )


def test_the_full_view_seeds_other_teams_workloads_as_they_are(compiled: list[dict[str, Any]]) -> None:
    """Where every team's Workloads are readable, nlp's are seeded as they are: its running 2 x 8-GPU job with
    what its hint leaves, its waiting ones with their own sizes and priorities, in Kueue's order among vision's;
    with that list Forbidden (`everyone` None), the team's view models nlp from its ClusterQueue's status."""
    mine = job("next", hint="5m")
    train, small, urgent = (of_nlp(job("train", hint="10m", pods=2)), of_nlp(job("eval", hint="2m", gpus=2)),
                            of_nlp(job("urgent", hint="5m", gpus=4)))  # fmt: skip
    theirs = [of_nlp(workload(train, admitted_ago=120)), of_nlp(workload(small, created_ago=30)),
              of_nlp(workload(urgent, prio=1000, created_ago=10))]  # fmt: skip
    team = live(compiled, [mine], [workload(mine, created_ago=20)], nlp_used=16, nlp_pending=2, nlp_holding=1)

    full = seed(full_view(team, theirs, [train, small, urgent]))
    names = [e.name for e in full.entries]
    assert names == ["other/nlp/job-train", "other/nlp/job-urgent", "other/nlp/job-eval", "job-next"]
    got = {
        e.name: (e.queue, e.pool, e.pools, e.pods, e.units, e.priority, e.remaining.known)
        for e in full.entries
    }
    assert got["other/nlp/job-train"] == ("nlp", "h100", ("h100",), 2, 8, 100, 480)  # 10 min less 2 run
    assert got["other/nlp/job-urgent"] == ("nlp", "", ("h100",), 1, 4, 1000, 300)
    assert got["other/nlp/job-eval"] == ("nlp", "", ("h100",), 1, 2, 100, 120)
    assert full.unseen == () and full.assumed[0].startswith("view: full")
    assert not any("seen only as their queues' use" in a for a in full.assumed)

    blind = seed(team)
    names = [e.name for e in blind.entries]
    assert names == ["other/nlp/h100/0", "other/nlp/h100/1", "other/nlp/waiting/0", "other/nlp/waiting/1",
                     "job-next"]  # fmt: skip
    assert {e.units for e in blind.entries[:4]} == {8} and blind.assumed[0].startswith("view: your team's")
    assert "queue nlp has 2 waiting jobs of another team" in blind.unseen[0]


def test_the_full_view_places_running_pods_where_they_are(compiled: list[dict[str, Any]]) -> None:
    """4 nodes of 8 GPUs; nlp's three 4-GPU jobs (300, 600, 900 s left) sit on three different nodes, so
    vision's gang of two 8-GPU pods fits only once the first ends: about 300 s. Without their pods' nodes the
    simulator packs the three on two nodes and the gang starts at once."""
    nodes = [{"metadata": {"name": f"n{i}", "labels": {"gpufleet.io/pool": "h100"}},
              "status": {"allocatable": {GPU: "8"}}} for i in range(4)]  # fmt: skip
    theirs = [of_nlp(job(f"t{s}", hint=f"{s}s", gpus=4)) for s in (300, 600, 900)]
    wls = [of_nlp(workload(j, admitted_ago=0)) for j in theirs]
    gang = job("gang", hint="5m", pods=2)
    team = live(compiled, [gang], [workload(gang)], nodes=nodes)
    pinned = seed(full_view(team, wls, theirs, [pod_of(j, f"n{i}") for i, j in enumerate(theirs)]))
    assert [e.nodes for e in pinned.entries[:3]] == [("n0",), ("n1",), ("n2",)]
    assert "3 jobs on the nodes their pods are bound to" in pinned.assumed[0]
    found = estimate(pinned, pinned.index("job-gang"), [])
    assert found.p50_s is not None and 300 <= found.p50_s <= 302 and found.runs == 1

    packed = seed(full_view(team, wls, theirs))
    assert all(e.nodes == () for e in packed.entries)
    found = estimate(packed, packed.index("job-gang"), [])
    assert found.p50_s is not None and found.p50_s < 2


def test_the_full_view_learns_other_teams_submissions_from_their_jobs(compiled: list[dict[str, Any]]) -> None:
    """nlp's own Jobs created over the last 40 s (one every 10 s, 4-GPU) are its later submissions in the full
    view; the team's view takes nlp to be given jobs of vision's shapes at the rate its queue finishes them."""
    mine = [submitted_job(f"s{i}", 50 - 10 * i) for i in range(5)]  # 1 GPU, one every 10 s over 50 s
    theirs = [of_nlp(submitted_job(f"n{i}", 40 - 10 * i, gpus=4)) for i in range(5)]
    team = live(compiled, mine, [], nlp_used=8, nlp_holding=2)
    full = {s.name: s for s in seed(full_view(team, [], theirs)).streams}
    assert set(full) == {"vision", "nlp"}
    assert full["nlp"].rate_per_s == pytest.approx(4 / 40) and full["nlp"].horizon_s == 40.0
    assert {(s.queue, s.units) for s in full["nlp"].shapes} == {("nlp", 4)}
    blind = {s.name: s for s in seed(team).streams}
    assert {(s.queue, s.units) for s in blind["nlp"].shapes} == {("nlp", 1)}  # vision's shapes
