"""`invoke simulate --dynamic` end to end on a small timed trace, the stack's compiled queues as its input, and
bad traces refused with file and row (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infra.simulate.dynamic import stack_world
from infra.simulate.dynamic_report import comparison_rows, to_json
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.sim.dynamic import Jobs, Pool, Queue, Settings, World, simulate
from scheduler.sim.dynamic.alternatives import REGISTRY, names, register, run_comparison
from scheduler.sim.errors import TraceError
from scheduler.sim.timed_traces import read_timed_pods
from tests.conftest import load_example
from tests.simulate.test_simulate_cli import invoke

HEADER = "arrival,duration,cpu_milli,memory_mib,num_gpu,gpu_milli,pods,team\n"


def _trace(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(header + "".join(r + "\n" for r in rows))
    return path


def test_the_queues_are_the_compiled_cluster_queues() -> None:
    """Kueue ClusterQueue `resourceGroups[].flavors[].resources[]` (nominalQuota, borrowingLimit) of the stack's
    own compiled policy, for the pool's GPU resource: example-prod's research team has 8 L40S GPUs nominal,
    may borrow 8 more, and 28 MIG slices (4 GPUs x 7 instances of 1g.10gb) on h100-mig."""
    spec = load_example("example-prod")
    trace_rows = ["0,60,1000,1024,1,1000,1,research"]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        world = stack_world(spec, read_timed_pods(_trace(Path(d), trace_rows))).world
    research = next(q for q in world.queues if q.name == "research")
    assert research.nominal["l40s-infer"] == 8 and research.borrowing_limit["l40s-infer"] == 8
    assert research.nominal["h100-mig"] == 28
    assert {q.name for q in world.queues} == {n for t in spec.teams for n in (t.name, f"{t.name}-topology")}
    assert world.settings.pods_ready_timeout_s == 1800  # waitForPodsReady.timeout 30m


@pytest.mark.parametrize("fair_sharing", [False, True])
def test_borrow_within_cohort_is_the_compiled_cluster_queues(tmp_path: Path, fair_sharing: bool) -> None:
    """Kueue ClusterQueue `spec.preemption.borrowWithinCohort` (API reference v1beta2: policy `Never` by
    default, `LowerPriority` with `maxPriorityThreshold`) as the stack compiles it: set unless fair sharing
    (which Kueue's classical preemption then does not use); the simulation reads the same threshold."""
    from infra.scheduling import scheduler_inputs
    from scheduler import compile as compile_policy

    spec = load_example("example-prod")
    scheduling = spec.scheduling.model_copy(
        update={"fair_sharing": fair_sharing, "borrow_within_cohort_max_priority": 50}
    )
    spec = spec.model_copy(update={"scheduling": scheduling})
    cq = next(o for o in compile_policy(*scheduler_inputs(spec)) if o["kind"] == "ClusterQueue")
    compiled = cq["spec"]["preemption"].get("borrowWithinCohort")
    world = stack_world(spec, read_timed_pods(_trace(tmp_path, ["0,60,1000,1024,1,1000,1,research"]))).world
    threshold = world.settings.borrow_within_cohort_max_priority
    if fair_sharing:
        assert compiled is None and threshold is None
    else:
        assert compiled == {"policy": "LowerPriority", "maxPriorityThreshold": threshold} and threshold == 50


@pytest.mark.parametrize(
    "strategies", [["LessThanOrEqualToFinalShare", "LessThanInitialShare"], ["LessThanInitialShare"]]
)
def test_fair_preemption_strategies_are_the_compiled_configurations(
    tmp_path: Path, strategies: list[str]
) -> None:
    """`scheduling.fairSharingPreemptionStrategies` becomes Kueue's Configuration `fairSharing.preemptionStrategies`
    (chart 0.19 values, `managerConfig`) and the engine's strategies alike; example-prod keeps the default."""
    import yaml

    from infra.scheduling import scheduler_inputs
    from scheduler import kueue_values

    spec = load_example("example-prod")
    assert spec.scheduling.fair_sharing_preemption_strategies == [
        "LessThanOrEqualToFinalShare",
        "LessThanInitialShare",
    ]
    scheduling = spec.scheduling.model_copy(update={"fair_sharing_preemption_strategies": strategies})
    spec = spec.model_copy(update={"scheduling": scheduling})
    values = kueue_values(scheduler_inputs(spec)[0])
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    world = stack_world(spec, read_timed_pods(_trace(tmp_path, ["0,60,1000,1024,1,1000,1,research"]))).world
    assert config["fairSharing"]["preemptionStrategies"] == strategies
    assert list(world.settings.fair_preemption_strategies) == strategies


def test_dynamic_run_writes_table_report_plots_and_json(tmp_path: Path) -> None:
    rows = [f"{i * 30},{600 + 60 * (i % 5)},4000,16384,{1 + i % 4},1000,1,{['research', 'batch'][i % 2]}"
            for i in range(40)]  # fmt: skip
    trace = _trace(tmp_path, rows)
    out = tmp_path / "out"
    result = invoke("--dynamic", "--stack", "example-prod", "--pods", str(trace), "--out", str(out),
                    "--json", str(tmp_path / "d.json"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "d.json").read_text())
    approaches = {(r["approach"], r["autoscaling"]) for r in data["comparison"]}
    assert approaches == {(a, s) for a in names() for s in (True, False)}
    for run in data["runs"]:
        assert run["started"] + run["never_started"] + run["unhostable"] == 40
    # every pool of the stack has its row, a pool no job reached included (one node group has one pool): no
    # job is submitted to a topology queue, so under the stack's queues the topology pool h100-train runs none
    pools = {p.name for p in load_example("example-prod").node_pools}
    for row in data["comparison"]:
        if row["approach"] != "one-node-group":
            assert {p["pool"] for p in row["pools"]} == pools
        assert sum(p["runs"] for p in row["pools"]) >= 40 - row["never_started"]
    stack_rows = [r for r in data["comparison"] if r["approach"] == "kueue-mostallocated"]
    assert all(next(p for p in r["pools"] if p["pool"] == "h100-train")["runs"] == 0 for r in stack_rows)
    assert "## Per pool" in (out / "report.md").read_text()
    assert (
        (out / "report.md").is_file() and (out / "over-time.png").is_file() and (out / "waits.png").is_file()
    )
    assert "kueue-fragmentationaware" in result.stdout and "preemptions" in result.stdout
    # In a log, where no progress bar is drawn, a line per finished run says the comparison is moving.
    total = 2 * len(names())
    progress = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == total and progress[-1].startswith(f"[{total}/{total}] ")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            ["0,60,1000,1024,1,1000,1,research", "5,-3,1000,1024,1,1000,1,research"],
            "row 2 (line 3): column 'duration'",
        ),
        (["x,60,1000,1024,1,1000,1,research"], "row 1 (line 2): column 'arrival'"),
        (["0,60,1000,1024,1,1000,0,research"], "row 1 (line 2): column 'pods' must be a whole number >= 1"),
        (["0,60,1000,1024,1,1000,1,nobody"], "row 1 (line 2): team 'nobody' is not a team of the stack"),
    ],
    ids=["negative-duration", "not-a-number", "empty-gang", "unknown-team"],
)
def test_bad_rows_exit_2_naming_file_and_row(tmp_path: Path, rows: list[str], message: str) -> None:
    trace = _trace(tmp_path, rows)
    result = invoke("--dynamic", "--stack", "example-prod", "--pods", str(trace))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{trace}, {message}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_trace_without_times_is_refused(tmp_path: Path) -> None:
    trace = _trace(tmp_path, ["1000,1024,1,1000"], header="cpu_milli,memory_mib,num_gpu,gpu_milli\n")
    with pytest.raises(TraceError, match="needs times: columns creation_time, deletion_time"):
        read_timed_pods(trace)
    result = invoke("--dynamic", "--nodes", str(trace), "--pods", str(trace))
    assert result.returncode == 2 and "give --pods FILE and --stack NAME" in result.stderr


def test_openb_times_give_arrival_and_duration(tmp_path: Path) -> None:
    """openb pod list: a job arrives at `creation_time` and runs `deletion_time - scheduled_time`; a pod never
    scheduled keeps the life the trace gave it (`deletion_time - creation_time`)."""
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    rows = ["p0,1000,1024,1,1000,,LS,Running,100,700,160", "p1,1000,1024,1,500,,BE,Pending,130,400,"]
    trace = read_timed_pods(_trace(tmp_path, rows, header=header))
    assert trace.arrival.tolist() == [0.0, 30.0]
    assert trace.duration.tolist() == [540.0, 270.0]
    bad = _trace(tmp_path, ["p0,1000,1024,1,1000,,LS,Running,100,50,60"], header=header)
    with pytest.raises(TraceError, match=r"row 1 \(line 2\): deletion_time 50 is before scheduled_time 60"):
        read_timed_pods(bad)


def test_the_docs_quote_the_benchmarks_table() -> None:
    """docs/simulation.md's comparison is the one benchmarks/dynamic_comparison.py last wrote, row for row, and
    names every approach the code compares, and with the null model's verdict."""
    from tests.conftest import ROOT

    bench = (ROOT / "benchmarks" / "dynamic_comparison.md").read_text().splitlines()
    start = next(i for i, line in enumerate(bench) if line.startswith("|"))
    end = next(i for i in range(start, len(bench)) if not bench[i].startswith("|"))
    table = bench[start:end]  # the first table: mean and spread over the seeds
    docs = (ROOT / "docs" / "simulation.md").read_text()
    assert "\n".join(table) in docs
    assert {row.split("|")[1].strip() for row in table[2:]} == set(names())
    verdict = [line for line in bench if "null-fifo against" in line]
    assert len(verdict) == 4 and all(line.split(":")[0] in ("- loses", "- DOES NOT LOSE") for line in verdict)


def _tiny_world() -> World:
    """Two teams of 4 GPUs nominal on two 4-GPU nodes; team 0 asks 6 GPUs at t=0 (it borrows 2)."""
    cluster = Cluster.build(["a-0", "a-1"], [64000] * 2, [262144] * 2, [4] * 2, ["a"] * 2)
    workload = Workload.build([1000] * 3, [1024] * 3, [4, 2, 2], [MILLI] * 3, ["a"] * 3)
    jobs = Jobs(
        arrival=np.array([0.0, 0.0, 10.0]),
        duration=np.array([100.0, 100.0, 50.0]),
        pods=np.array([1, 1, 1]),
        queue=np.array([0, 0, 1]),
        priority=np.array([100, 100, 100]),
        workload=workload,
    )
    queues = (Queue("a-team", ("a",), {"a": 4}), Queue("b-team", ("a",), {"a": 4}))
    return World(cluster, (Pool("a", (0, 1), min_nodes=1, provision_s=60),), queues, jobs, Settings())


@pytest.fixture
def one_queue_no_preemption() -> Iterator[str]:
    """A throwaway alternative, registered for one test and unregistered after it."""
    name = "one-queue-no-preemption"

    @register(name, "one queue for everyone, no preemption")
    def transform(world: World) -> World:
        capacity = {p.name: world.capacity_units(p) for p in world.pools}
        one = Queue("everyone", tuple(capacity), capacity)
        jobs = replace(world.jobs, queue=np.zeros(world.jobs.size, dtype=np.int64))
        settings = replace(world.settings, reclaim_within_cohort=False, preempt_lower_priority=False)
        return replace(world, queues=(one,), jobs=jobs, settings=settings)

    yield name
    del REGISTRY[name]


def test_a_registered_alternative_joins_the_comparison(one_queue_no_preemption: str) -> None:
    """Adding an approach is one registered function: it runs with and without autoscaling, and its rows reach
    the table and JSON, beside every other approach."""
    results = run_comparison(_tiny_world())
    assert set(results) == {(a, s) for a in names() for s in (True, False)}
    assert names()[-1] == one_queue_no_preemption
    ours = results[(one_queue_no_preemption, False)]
    assert ours.label == one_queue_no_preemption and ours.started == 3 and ours.preemptions == 0
    assert [t.team for t in ours.teams] == ["everyone"]
    rows = [r for r in comparison_rows(results) if r["approach"] == one_queue_no_preemption]
    assert [r["autoscaling"] for r in rows] == [True, False]
    assert one_queue_no_preemption in to_json(results, {}, "kueue-mostallocated", _tiny_world().settings)


def test_an_alternative_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register("null-fifo", "again")(lambda world: world)


def test_the_table_counts_pods_ready_evictions_where_they_happened() -> None:
    """Kueue admits on quota alone: a gang of two 4-GPU pods gets pool b (a's quota holds only 4 GPUs), whose
    three nodes hold 12 GPUs while another team's two 1-GPU jobs, spread by LeastAllocated, leave one whole node
    until t=1000. One pod waits for a whole node until `waitForPodsReady.timeout` (300 s) evicts the gang, three
    times (310, 610, 910 s); the team's 1-GPU job on pool a runs at once. The comparison's row counts the
    evictions, and its pool rows put them in pool b."""
    cluster = Cluster.build([f"{p}-{i}" for p, i in (("a", 0), ("b", 0), ("b", 1), ("b", 2))], [64000] * 4,
                            [262144] * 4, [4] * 4, ["a", "b", "b", "b"])  # fmt: skip
    workload = Workload.build([1000] * 4, [1024] * 4, [1, 1, 1, 4], [MILLI] * 4, ["a|b", "b", "b", "a|b"])
    jobs = Jobs(
        arrival=np.array([0.0, 0.0, 0.0, 10.0]),
        duration=np.array([1000.0, 1000.0, 1000.0, 100.0]),
        pods=np.array([1, 1, 1, 2]),
        queue=np.array([0, 1, 1, 0]),
        priority=np.array([100] * 4),
        workload=workload,
    )
    queues = (Queue("t", ("a", "b"), {"a": 4, "b": 10}), Queue("u", ("b",), {"b": 2}))
    settings = Settings(policy="LeastAllocated", autoscale=False, pods_ready_timeout_s=300)
    world = World(cluster, (Pool("a", (0,)), Pool("b", (1, 2, 3))), queues, jobs, settings)
    (row,) = comparison_rows({("the stack", False): simulate(world, check=True)})
    assert row["ready_evictions"] == 3
    assert [(p["pool"], p["runs"], p["ready_evictions"]) for p in row["pools"]] == [("a", 1, 0), ("b", 3, 3)]


def _seed_rows(null: dict[str, float], stack: dict[str, float]) -> list[dict[str, Any]]:
    """One seed's comparison rows for the null model and the stack's approach, both autoscaling settings."""
    from benchmarks.dynamic_comparison import COLUMNS, NULL

    rows = []
    for approach, values in ((NULL, null), ("kueue-mostallocated", stack)):
        for scaled in (True, False):
            row: dict[str, Any] = {key: 0.0 for key, _, _ in COLUMNS} | values
            rows.append(row | {"approach": approach, "autoscaling": scaled, "pools": []})
    return rows


def test_the_null_model_verdict_pairs_the_seeds() -> None:
    """The comparison's verdict pairs the seeds: a null model worse on every seed loses even when one seed's
    tail makes its standard deviation larger than its mean; one worse on 6 seeds of 10 does not."""
    from benchmarks.dynamic_comparison import aggregate, null_verdict

    def verdict(null_queued: list[float]) -> list[str]:
        per_seed = [_seed_rows({"queued_mean_min": q, "blocked_idle_gpu_h": q}, {"queued_mean_min": 10.0 + i % 3,
                     "blocked_idle_gpu_h": 10.0 + i % 3}) for i, q in enumerate(null_queued)]  # fmt: skip
        return null_verdict(aggregate(per_seed), "kueue-mostallocated", per_seed)

    tail = [13.0, 14.0, 15.0, 16.0, 17.0, 600.0, 18.0, 19.0, 20.0, 21.0]
    lines = verdict(tail)
    assert len(lines) == 4 and all(line.startswith("loses") for line in lines), lines
    assert "worse on 10 of 10" in lines[0] and "p = 0.0010" in lines[0], lines[0]
    mixed = [13.0, 14.0, 15.0, 16.0, 17.0, 600.0, 5.0, 6.0, 7.0, 8.0]
    assert all(line.startswith("DOES NOT LOSE") for line in verdict(mixed)), verdict(mixed)
