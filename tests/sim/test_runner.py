"""The protocol runner: order and inflation, bucketing, determinism, parallel runs, and a real-trace smoke run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scheduler.sim import RunResult, read_nodes, read_pods, run_many, run_one
from scheduler.sim.policies import Context
from scheduler.sim.policies.fgd import FgdPolicy
from scheduler.sim.protocol import bucket_curve, order_and_inflate, rank_nodes, seed_order
from scheduler.sim.runner import replay, run_placed
from tests.conftest import ROOT
from tests.sim.tiny import cluster, workload

SMALL = cluster(("a", 32000, 65536, 4, "T4"), ("b", 16000, 65536, 2, "A10"), ("c", 8000, 32768, 1, "T4"))
PODS = workload(
    (1000, 512, 1, 1000),
    (2000, 512, 1, 500),
    (1000, 512, 0, 0),
    (4000, 1024, 2, 1000),
    (500, 256, 1, 250),
    (1000, 512, 1, 1000, "A10"),
)


def test_inflation_reaches_target_without_overshoot() -> None:
    rng = np.random.default_rng(7)
    target = 1.3 * 7000
    order = order_and_inflate(PODS, rng, target)
    req = PODS.gpu_request_milli[order]
    assert sorted(order[: PODS.size].tolist()) == list(range(PODS.size))  # every original pod, shuffled
    assert req.sum() <= target
    assert req.sum() > target - req.max()  # stopped before the copy that would overshoot


def test_trimming_when_above_target() -> None:
    order = order_and_inflate(PODS, np.random.default_rng(1), 3000)
    assert PODS.gpu_request_milli[order].sum() <= 3000
    assert len(set(order.tolist())) == len(order) < PODS.size


def test_rank_nodes_prefixes_a_random_rank_and_keeps_each_node() -> None:
    ranked = rank_nodes(SMALL, np.random.default_rng(5))
    assert sorted(int(n.split("-", 1)[0]) for n in ranked.names) == [0, 1, 2]
    assert all(len(n.split("-", 1)[0]) == 4 for n in ranked.names)
    for i, name in enumerate(ranked.names):
        j = SMALL.names.index(name.split("-", 1)[1])
        assert (ranked.cpu_milli[i], ranked.num_gpu[i], ranked.gpu_model[i]) == (
            SMALL.cpu_milli[j],
            SMALL.num_gpu[j],
            SMALL.gpu_model[j],
        )
    orders = {
        tuple(n.split("-", 1)[1] for n in rank_nodes(SMALL, np.random.default_rng(s)).names)
        for s in range(12)
    }
    assert len(orders) > 1


def test_ties_go_to_the_node_of_lowest_random_rank() -> None:
    same = cluster(*[(f"n{i}", 8000, 16384, 2, "T4") for i in range(6)])
    cpu_only = workload((1000, 512, 0, 0))
    chosen = set()
    for seed in range(10):
        ranked = rank_nodes(same, np.random.default_rng(seed))
        placement = replay(ranked, cpu_only, "GpuPacking").placements[0]
        assert placement is not None
        name = ranked.names[placement[0]]
        assert name.startswith("0000-")  # every node scores 0: the lowest rank wins
        chosen.add(name.split("-", 1)[1])
    assert len(chosen) > 1  # not always the smallest original name


class SeenNodes(FgdPolicy):
    """FGD keeping the nodes the run bound it to (their ranked names)."""

    def bind(self, ctx: Context) -> None:
        super().bind(ctx)
        self.seen = ctx.cluster


@pytest.mark.parametrize("seed", [0, 5, 42])
def test_seed_order_is_the_runs_own_start(seed: int) -> None:
    """A replay twin is started with seed_order's ranked nodes before the run places anything: the run must
    name its nodes exactly so, or an extender breaking ties by name parts from the simulator's rank."""
    order, ranked, _ = seed_order(SMALL, PODS, seed)
    policy = SeenNodes()
    result = run_one(SMALL, PODS, policy, seed)
    assert policy.seen.names == ranked.names
    assert result.pods == len(order)
    assert {n.split("-", 1)[1] for n in ranked.names} == set(SMALL.names)


def test_run_placed_names_each_pods_node_as_the_trace_does() -> None:
    result, placed = run_placed(SMALL, PODS, "FGD", 4, share_rule="first-fit")
    assert result.allocated == run_one(SMALL, PODS, "FGD", 4, share_rule="first-fit").allocated
    assert len(placed) == result.pods and sum(p is None for p in placed) == result.failed > 0
    gpus = dict(zip(SMALL.names, SMALL.num_gpu.tolist(), strict=True))
    for p in placed:
        if p is not None:
            assert p[0] in gpus and all(0 <= g < gpus[p[0]] for g in p[1])
    assert sum(len(p[1]) for p in placed if p is not None) >= 1


def test_bucket_curve_means_and_fills_gaps() -> None:
    curve = bucket_curve(np.array([0.2, 0.4, 1.6, 3.0]), np.array([1.0, 3.0, 5.0, 7.0]), max_pct=4)
    assert curve.tolist() == [2.0, 2.0, 5.0, 7.0, 7.0]


def test_run_is_deterministic_per_seed() -> None:
    a = run_one(SMALL, PODS, "Random", 3)
    b = run_one(SMALL, PODS, "Random", 3)
    assert a.allocated == b.allocated and a.failed == b.failed
    assert len(a.allocated) == len(a.frag_amount) == len(a.frag_ratio) == 131
    others = {run_one(SMALL, PODS, "Random", s).allocated for s in range(4, 12)}
    assert len(others) > 1


def test_run_many_parallel_matches_in_process() -> None:
    done: list[RunResult] = []
    parallel = run_many(SMALL, PODS, ["FGD", "BestFit"], [1, 2], processes=2, on_done=done.append)
    serial = run_many(SMALL, PODS, ["FGD", "BestFit"], [1, 2], processes=1)
    assert [(r.policy, r.seed) for r in parallel] == [("FGD", 1), ("FGD", 2), ("BestFit", 1), ("BestFit", 2)]
    assert sorted((r.policy, r.seed) for r in done) == sorted((r.policy, r.seed) for r in parallel)
    for p, s in zip(parallel, serial, strict=True):
        assert (p.allocated, p.frag_amount, p.failed) == (s.allocated, s.frag_amount, s.failed)
    assert parallel[0].to_dict()["policy"] == "FGD"


def test_smoke_on_real_trace_slice(shared_dir: Path) -> None:
    trace = shared_dir / "traces/alibaba-gpu-v2023"
    full = read_nodes(trace / "openb_node_list_gpu_node.csv")
    nodes = type(full).build(
        full.names[:120],
        full.cpu_milli[:120],
        full.memory_mib[:120],
        full.num_gpu[:120],
        full.gpu_model[:120],
    )
    pods = read_pods(trace / "openb_pod_list_default.csv").take(np.arange(1500))
    results = run_many(nodes, pods, ["FGD", "Random"], [42], processes=1)
    for r in results:
        alloc = np.array(r.allocated)
        assert np.all(np.diff(alloc) >= -1e-9)  # allocation only grows with arrivals
        assert np.all(alloc <= np.minimum(np.arange(131) + 0.5, 100))  # x is rounded to whole percents
        assert 0 < r.failed < r.pods
        assert all(0 <= f <= 100 for f in r.frag_amount)
        assert r.unallocated(100) == pytest.approx(100 - r.allocated[100])
    fgd, rnd = results
    assert fgd.unallocated(130) < rnd.unallocated(130)


STOPPED_AS_THE_POOL_IS_BUILT = """
import multiprocessing, os, signal, sys, threading
from infra.errors import Interrupted, raise_on_stop_signals
from scheduler.sim import run_many
from tests.sim.test_runner import PODS, SMALL

built = multiprocessing.Pool

def built_then_stopped(*args, **kwargs):
    pool = built(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)  # the stop arrives as the pool's constructor returns
    return pool

multiprocessing.Pool = built_then_stopped
if sys.argv[1:] == ["refreshing"]:  # a thread that lets stops through, as a progress bar's refresh thread does
    threading.Thread(target=threading.Event().wait, daemon=True).start()
raise_on_stop_signals()
try:
    run_many(SMALL, PODS, ["FGD"], range(40), processes=2)
except Interrupted as stop:
    print(stop, *stop.__notes__, file=sys.stderr)
    sys.exit(143)
"""


@pytest.mark.parametrize("threads", ["alone", "refreshing"])
def test_a_stop_as_the_worker_pool_is_built_ends_the_run_and_its_workers(threads: str) -> None:
    """A stop that lands while the worker pool is being built ends the command at once, workers and all: one
    raised inside the pool's constructor left a pool that nobody terminated, whose worker handler replaced the
    killed workers with ones that waited for work forever, holding the command's output open. With another
    thread running (`invoke simulate`'s progress bar refreshes from one) the signal reaches that thread, and
    Python runs the stop's handler in the main thread mid-constructor, whatever the main thread's mask."""
    command = subprocess.Popen([sys.executable, "-c", STOPPED_AS_THE_POOL_IS_BUILT, threads], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _, err = command.communicate(timeout=30)
    finally:
        command.kill()
    assert command.returncode == 143, err
    assert err.strip() == "stopped by SIGTERM 0 of 40 runs had finished; the others were abandoned", err
