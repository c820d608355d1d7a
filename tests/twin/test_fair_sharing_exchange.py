"""Two borrowers at equal shares taking a pool from each other, on the real Kueue v0.19.2 and in the simulator.

The world is the simulator's two-pool exchange (tests/sim/test_dynamic_fair_sharing.py, `exchange`) written as a
stack and compiled as the stack compiles it: pool `a`, 16 time-sliced replicas (`nvidia.com/gpu.shared`, two
L40S hosts of 4 GPUs, 2 replicas each), and pool `m`, 6 whole GPUs (`nvidia.com/gpu`, one host), both the
quota of team `lender`; teams `t1` (weight 2) and `t2` (weight 1) have no quota and borrow. The compiled
ClusterQueues also carry `cpu` and `memory` (the `gpu-cores` flavor with the cores and memory that come with
a team's GPUs, a CPU queue per team), and every pod asks one core and 4 GiB beside its GPU, as the twin replay's
jobs do, so Kueue's dominant resource share weighs cores and memory as well as both GPU resources.

The load: t1 holds 4 GPUs of `m`, t2 2 (4/6 over weight 2 and 2/6 over weight 1: 333‰ each, `m` the
dominant resource of both); in `a` the lender runs 10 replicas, t1 4 and t2 2, so `a` is full; then t2 asks
one more replica of `a`. Nobody's share moves with a replica of `a` (t1's cores, 8 of the 320 the root can
lend, stand at 12.5‰), so `LessThanOrEqualToFinalShare` holds both ways and the preemptions do not stop;
Kueue's own proof that this cannot happen assumes the workload uses the dominant resource
(docs/simulation.md). With `fairSharingPreemptionStrategies: [LessThanInitialShare]` nobody is preempted, on
Kueue as in the engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.simulate.dynamic import stack_world
from infra.stackfile import load_stack
from scheduler.sim.dynamic.engine import Simulation
from scheduler.sim.timed_traces import read_timed_pods
from tests.conftest import ROOT
from tests.fair_sharing_exchange import DEFAULT, STRICT, exchange_stack
from tests.support import eventually
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube
from twin.dynamic_replay import HEADER, ReplayJob, job_object

SHARED = "nvidia.com/gpu.shared"
WHOLE = "nvidia.com/gpu"
REASON = "InCohortFairSharing"
COHORT = "gpufleet"  # the metal stack's cohort, parent of each team's Cohort


# (team, pool, duration s, arrival s) in submission order; the index of a row is the job's index in the engine
M_JOBS = [("t1", "m", 1000.0, 0.0)] * 4 + [("t2", "m", 1000.0, 0.0)] * 2
A_JOBS = [("lender", "a", 300.0, 0.0)] * 10 + [("t1", "a", 300.0, 0.0)] * 4 + [("t2", "a", 300.0, 0.0)] * 2
NEWCOMER = [("t2", "a", 300.0, 10.0)]
ROWS = M_JOBS + A_JOBS + NEWCOMER
T1_A = {i for i, (team, pool, _, _) in enumerate(ROWS) if (team, pool) == ("t1", "a")}
T2_A = {i for i, (team, pool, _, _) in enumerate(ROWS) if (team, pool) == ("t2", "a")}
NEW = len(ROWS) - 1
REPEATS = 3  # preemptions of the same job that show they do not stop


def replay_job(index: int) -> ReplayJob:
    team, _, duration, arrival = ROWS[index]
    return ReplayJob(index, arrival, duration, 1, 1, team, "default")


def job_doc(index: int) -> dict[str, Any]:
    """The replay's Job (its pod as the twin replay makes it) asking one unit of its pool's GPU resource."""
    doc = job_object(replay_job(index))
    resource = SHARED if ROWS[index][1] == "a" else WHOLE
    requests = {"cpu": "1", "memory": "4Gi", resource: "1"}
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": requests, "limits": requests}
    return doc


def write_trace(path: Path) -> Path:
    """The same jobs as a generic timed trace: a replica of `a` is half a GPU (2 replicas a GPU)."""
    lines = [",".join(HEADER)]
    for team, pool, duration, arrival in ROWS:
        milli = 500 if pool == "a" else 1000
        lines.append(f"{arrival},{duration},1000,4096,1,{milli},,1,{team},default")
    path.write_text("\n".join(lines) + "\n")
    return path


def engine_preemptions(stack: Path, trace: Path) -> list[tuple[int, int, str]]:
    """Every preemption (victim, preemptor, reason) of the stack's world for the trace, in the engine's order."""
    out: list[tuple[int, int, str]] = []

    class Recording(Simulation):
        def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
            out.append((victim, preemptor, reason))
            super().preempting(victim, preemptor, pool, reason)

    Recording(stack_world(load_stack(stack), read_timed_pods(trace)).world).run()
    return out


@pytest.fixture(scope="module")
def exchange_twin(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Kube, Path]]:
    """The exchange's twin for the strategies a test names (one twin up at a time: pytest finishes a module
    fixture's parameter before it sets up the next)."""
    path = tmp_path_factory.mktemp("stacks") / "Pulumi.exchange.yaml"
    metal = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    path.write_text(yaml.safe_dump(exchange_stack(metal, request.param), sort_keys=False))
    twin = start_twin(tmp_path_factory, path)
    try:
        yield Kube.of(twin), path
    finally:
        twin.stop()


def workloads(kube: Kube) -> dict[int, dict[str, Any]]:
    """The jobs' Workloads by job index (the Job's name carries it)."""
    out: dict[int, dict[str, Any]] = {}
    for team in ("lender", "t1", "t2"):
        for wl in kube.items("workloads.kueue.x-k8s.io", team):
            owners = [ref["name"] for ref in wl["metadata"].get("ownerReferences", [])]
            if owners and owners[0].startswith("dyn-"):
                out[int(owners[0].removeprefix("dyn-"))] = wl
    return out


def is_true(wl: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in wl.get("status", {}).get("conditions", [])
                 if c["type"] == kind and c["status"] == "True"), None)  # fmt: skip


def preempted(wl: dict[str, Any]) -> int:
    """How often Kueue evicted the workload by preemption (status.schedulingStats.evictions, reason `Preempted`:
    Kueue v0.19.2 records a preemption with an empty underlying cause, its kind in the `Preempted` condition)."""
    stats = (wl.get("status", {}).get("schedulingStats") or {}).get("evictions", [])
    return sum(e["count"] for e in stats if e["reason"] == "Preempted")


def preemption_reasons(found: dict[int, dict[str, Any]]) -> set[str]:
    """The reasons of the workloads' `Preempted` conditions that stand (a preemption not yet requeued)."""
    return {c["reason"] for wl in found.values() for c in wl.get("status", {}).get("conditions", [])
            if c["type"] == "Preempted" and c["status"] == "True"}  # fmt: skip


def admitted(kube: Kube, jobs: range) -> dict[int, dict[str, Any]] | None:
    found = workloads(kube)
    return found if all(i in found and is_true(found[i], "Admitted") for i in jobs) else None


def summary(kube: Kube) -> str:
    """Each job's true conditions and preemptions, and its pods' phases, for a failure message."""
    lines = []
    for i, wl in sorted(workloads(kube).items()):
        true = [c["type"] + ("/" + c["reason"] if c["type"] in ("Evicted", "Preempted", "QuotaReserved") else "")
                for c in wl.get("status", {}).get("conditions", []) if c["status"] == "True"]  # fmt: skip
        lines.append(f"{i} {ROWS[i][0]}/{ROWS[i][1]}: {' '.join(true)} preempted={preempted(wl)}")
    for team in ("t1", "t2"):
        for p in kube.items("pods", team):
            lines.append(f"pod {team}/{p['metadata']['name']} {p['status'].get('phase')} "
                         f"deleting={bool(p['metadata'].get('deletionTimestamp'))}")  # fmt: skip
    return "\n".join(lines)


def weighted_share(kube: Kube, team: str) -> int:
    cohort = kube.get("cohort.kueue.x-k8s.io", f"{COHORT}-{team}")
    return int(cohort["status"]["fairSharing"]["weightedShare"])


def fill(kube: Kube) -> None:
    """The jobs of `m`, then those of `a`, each batch admitted before the next (no preemption), and Kueue's
    weighted shares of t1's and t2's Cohorts equal at 334 (333.3‰ rounded up: `m` dominates both)."""
    for i in range(len(M_JOBS)):
        assert kube.create(job_doc(i)).ok
    eventually(lambda: admitted(kube, range(len(M_JOBS))), "the jobs of m admitted", 120)
    for i in range(len(M_JOBS), NEW):
        assert kube.create(job_doc(i)).ok
    before = eventually(lambda: admitted(kube, range(NEW)), "every job of m and a admitted", 120)
    assert not any(preempted(wl) for wl in before.values())
    shares = eventually(lambda: (s := (weighted_share(kube, "t1"), weighted_share(kube, "t2"))) == (334, 334)
                        and s, "t1's and t2's Cohorts at 334", 60)  # fmt: skip
    assert shares == (math.ceil(4000 / 6 / 2), math.ceil(2000 / 6))


def clean(kube: Kube) -> None:
    for team in ("lender", "t1", "t2"):
        kube.attempt("delete", "jobs", "-n", team, "--all", "--wait=false")


@pytest.mark.parametrize("exchange_twin", [DEFAULT], indirect=True, ids=["default"])
def test_two_borrowers_at_equal_shares_evict_each_other_on_kueue_as_in_the_engine(
    exchange_twin: tuple[Kube, Path], tmp_path: Path
) -> None:
    """Kueue first: the jobs of `m`, then those of `a` (all admitted, `a` full, no preemption), then t2's
    newcomer. Kueue reports both teams' Cohorts at the same weighted share, 334 (333.3‰ rounded up: `m`
    dominates, the cores do not break the tie); the newcomer evicts one of t1's jobs of `a`
    (`InCohortFairSharing`) and goes on evicting it: within two minutes the same job is preempted again and
    again, by the newcomer alone or, when the newcomer got in, evicting it back; no other job is touched.
    Between two preemptions Kueue re-admits the victim, not the newcomer: the preemptor waits for the next
    cycle (v0.19.2 pkg/scheduler/scheduler.go `markPreemptionOutcome`: "Pending the preemption"), where the
    two tie on share and priority and the victim, queued at its creation time (pkg/workload/workload.go
    `GetQueueOrderTimestamp`), is the older. The engine, given the same jobs on the same stack, also preempts
    without end between the same two jobs, and its first preemption is Kueue's; it admits the preemptor at
    once (docs/simulation.md has the difference)."""
    kube, stack = exchange_twin
    try:
        fill(kube)
        assert kube.create(job_doc(NEW)).ok
        newcomer_uid = eventually(lambda: workloads(kube).get(NEW, {}).get("metadata", {}).get("uid"),
                                  "the newcomer's Workload", 60)  # fmt: skip

        def first() -> tuple[int, dict[str, Any]] | None:
            hit = [(i, c) for i, wl in workloads(kube).items() if (c := is_true(wl, "Preempted"))]
            return hit[0] if hit else None

        victim, cond = eventually(first, "the first preemption", 60)
        assert victim in T1_A and cond["reason"] == REASON, (victim, cond)
        assert newcomer_uid in cond["message"], cond["message"]

        def repeated() -> dict[int, int] | None:
            counts = {i: n for i, wl in workloads(kube).items() if (n := preempted(wl))}
            return counts if counts.get(victim, 0) >= REPEATS else None

        try:
            counts = eventually(repeated, f"the first victim preempted {REPEATS} times", 120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{summary(kube)}") from None
        assert set(counts) <= {victim, NEW}  # the same two workloads; the lender keeps its jobs
        assert counts.get(NEW, 0) < counts[victim]  # the victim comes back ahead of the newcomer
        assert preemption_reasons(workloads(kube)) <= {REASON}
    finally:
        clean(kube)

    sim = engine_preemptions(stack, write_trace(tmp_path / "exchange.csv"))
    assert {reason for _, _, reason in sim} == {REASON}
    assert sim[0][1] == NEW and sim[0][0] in T1_A
    assert {(v, p) for v, p, _ in sim} == {(sim[0][0], NEW), (NEW, sim[0][0])}  # the same two, both ways
    assert len(sim) >= REPEATS


@pytest.mark.parametrize("exchange_twin", [STRICT], indirect=True, ids=["strict"])
def test_with_the_strict_strategy_neither_borrower_evicts_on_kueue_nor_in_the_engine(
    exchange_twin: tuple[Kube, Path], tmp_path: Path
) -> None:
    """`fairSharingPreemptionStrategies: [LessThanInitialShare]`: the same world and jobs. Kueue tries the
    newcomer and leaves it pending without a preemption (its `QuotaReserved` condition says why, and not
    "Pending the preemption"), as 334 is not below 334; the engine, reading the same stack, preempts nothing."""
    kube, stack = exchange_twin
    try:
        fill(kube)
        assert kube.create(job_doc(NEW)).ok

        def pending() -> dict[str, Any] | None:
            wl = workloads(kube).get(NEW, {})
            return next((c for c in wl.get("status", {}).get("conditions", [])
                         if c["type"] == "QuotaReserved" and c["status"] == "False"), None)  # fmt: skip

        cond = eventually(pending, "the newcomer tried and left pending", 60)
        assert "Pending the preemption" not in cond["message"], cond["message"]
        found = workloads(kube)
        assert not any(preempted(wl) or is_true(wl, "Preempted") for wl in found.values()), summary(kube)
        assert not is_true(found[NEW], "QuotaReserved")
    finally:
        clean(kube)

    assert engine_preemptions(stack, write_trace(tmp_path / "exchange.csv")) == []
