"""Each pool scales down by its own settings: a node group's unneeded time and cluster-autoscaler's cool-down
after a scale-up, Karpenter's consolidateAfter, and capacity blocks kept for their window and paid whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infra.simulate.dynamic import stack_world
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.sim.dynamic import Jobs, Pool, Queue, Result, Settings, Simulation, World, simulate
from scheduler.sim.dynamic.alternatives import REGISTRY
from scheduler.sim.timed_traces import read_timed_pods
from tests.conftest import load_example

INF = float("inf")


def cluster(nodes: int, gpus: int = 4) -> Cluster:
    return Cluster.build([f"a-{i}" for i in range(nodes)], [64000] * nodes, [262144] * nodes,
                         [gpus] * nodes, ["a"] * nodes)  # fmt: skip


def jobs(rows: list[tuple[float, float, int]]) -> Jobs:
    """rows: (arrival s, duration s, GPUs), one pod each, one queue."""
    n = len(rows)
    return Jobs(
        arrival=np.array([r[0] for r in rows], dtype=np.float64),
        duration=np.array([r[1] for r in rows], dtype=np.float64),
        pods=np.ones(n, dtype=np.int64),
        queue=np.zeros(n, dtype=np.int64),
        priority=np.full(n, 100, dtype=np.int64),
        workload=Workload.build([1000] * n, [1024] * n, [r[2] for r in rows], [MILLI] * n, ["a"] * n),
    )


QUEUE = (Queue("t", ("a",), {"a": 8}),)
SETTINGS = Settings(pods_ready_timeout_s=None)


def one_job(
    pool: Pool, settings: Settings = SETTINGS, rows: list[tuple[float, float, int]] | None = None
) -> Result:
    return simulate(World(cluster(2), (pool,), QUEUE, jobs(rows or [(0, 100, 4)]), settings), check=True)


def test_a_node_group_keeps_an_empty_node_through_the_cool_down_after_a_scale_up() -> None:
    """Scale-up at t=0, node Ready at 600, empty from 700, unneeded 600 s: it would go at 1300, but
    `--scale-down-delay-after-add=30m` holds every group until 1800; the group's own unneeded time (here 900 s)
    replaces the stack's."""
    pool = Pool("a", (0, 1), provision_s=600, node_price_hour=1.0)
    assert one_job(pool).node_hours == pytest.approx(1300 / 3600)
    cooled = one_job(pool, Settings(pods_ready_timeout_s=None, scale_down_delay_after_add_s=1800))
    assert cooled.node_hours == pytest.approx(1800 / 3600)
    own = Pool("a", (0, 1), provision_s=600, node_price_hour=1.0, unneeded_s=900.0)
    assert one_job(own).node_hours == pytest.approx(1600 / 3600)


def test_an_empty_karpenter_node_goes_after_consolidate_after_with_no_cool_down() -> None:
    """A Karpenter pool with consolidateAfter 1h: the node, empty from 700, goes at 4300 whatever
    cluster-autoscaler's cool-down; `Never` keeps it to the end of the run."""
    settings = Settings(pods_ready_timeout_s=None, scale_down_delay_after_add_s=7200, requeue_batch_s=0)
    pool = Pool("a", (0, 1), provision_s=600, node_price_hour=1.0, unneeded_s=3600.0, karpenter=True)
    assert one_job(pool, settings).node_hours == pytest.approx(4300 / 3600)
    never = Pool("a", (0, 1), provision_s=600, node_price_hour=1.0, unneeded_s=INF, karpenter=True)
    r = one_job(never, settings, [(0, 100, 4), (5000, 100, 4)])
    assert r.node_hours == pytest.approx(5100 / 3600)  # one node, up from 0 to the last job's end
    assert r.waits["t"] == [600.0, 0.0]  # the kept node took the second job at once


def test_a_capacity_block_is_paid_for_its_whole_window_and_keeps_its_nodes() -> None:
    """A two-node block for t in [0, 7200), $10 a node-hour: one 100-s job uses one node, yet the block costs
    2 nodes x 2 h x $10; the node it booted is never scaled down inside the window, and goes at its end."""
    pool = Pool("a", (0, 1), provision_s=600, node_price_hour=10.0, window=(0.0, 7200.0))
    r = one_job(pool)
    assert r.cost == pytest.approx(40.0)
    assert r.node_hours == pytest.approx((7200 - 0) / 3600)  # booting from 0, Ready from 600 to 7200
    by_hour = one_job(Pool("a", (0, 1), provision_s=600, node_price_hour=10.0))
    assert by_hour.cost == pytest.approx(10.0 * 1300 / 3600)
    # a block bought for the whole run: paid to the run's end, which its kept nodes do not push back
    whole = one_job(Pool("a", (0, 1), provision_s=600, node_price_hour=10.0, window=(0.0, INF)),
                    Settings(pods_ready_timeout_s=None, requeue_batch_s=0))  # fmt: skip
    assert whole.cost == pytest.approx(2 * 700 / 3600 * 10.0)


def test_one_node_group_is_an_ordinary_group_whatever_the_largest_pool_was() -> None:
    """The naive one-node-group row builds its group from the largest pool: a capacity block there does not
    make the group a block, and the group has no ProvisioningRequest check."""
    block = Pool("a", (0, 1), provision_s=600, node_price_hour=10.0, window=(0.0, INF), unneeded_s=INF)
    world = World(cluster(2), (block,), (Queue("t", ("a",), {"a": 8}, checked=("a",)),), jobs([(0, 100, 4)]),
                  SETTINGS)  # fmt: skip
    one = REGISTRY["one-node-group"].transform(world)
    assert (one.pools[0].window, one.pools[0].unneeded_s, one.queues[0].checked) == (None, None, ())


def test_nothing_runs_on_a_capacity_block_outside_its_window() -> None:
    """A block from 1000 to 2500: a job at t=0 waits for the window and the boot (starts at 1600); a job too long
    for what is left of the window is stopped at its end and, with no node left, never finishes."""
    pool = Pool("a", (0, 1), provision_s=600, node_price_hour=10.0, window=(1000.0, 2500.0))
    r = one_job(pool, rows=[(0, 100, 4), (0, 5000, 4)])
    assert sorted(r.waits["t"]) == [1600.0, 1600.0]
    assert r.preemptions == 1  # the window's end evicted the long job
    assert r.cost == pytest.approx(2 * 1500 / 3600 * 10.0)


def test_example_prods_pools_scale_down_as_compiled(tmp_path: Path) -> None:
    """example-prod: the capacity block's group never scales down and is billed whole, the other groups by the
    stack's 10m and its 20m cool-down, and the ProvisioningRequest check on the pool it lists (`h100-train`, in
    the topology queues) and no other; example-karpenter's NodePools consolidate after their compiled
    consolidateAfter."""
    trace = tmp_path / "jobs.csv"
    trace.write_text("arrival,duration,cpu_milli,memory_mib,num_gpu,gpu_milli,pods,team\n0,60,1000,1024,1,1000,1,research\n")  # fmt: skip
    prod = stack_world(load_example("example-prod"), read_timed_pods(trace)).world
    pools = {p.name: p for p in prod.pools}
    assert pools["h100-train"].window == (0.0, INF) and pools["h100-train"].unneeded_s == 8760 * 3600
    assert (pools["l40s-infer"].unneeded_s, pools["l40s-infer"].window) == (600.0, None)
    assert prod.settings.scale_down_delay_after_add_s == 1200
    assert {q.name: q.checked for q in prod.queues}["research-topology"] == ("h100-train",)
    assert all(q.checked == (("h100-train",) if q.name.endswith("-topology") else ()) for q in prod.queues)
    karpenter = stack_world(load_example("example-karpenter"), read_timed_pods(trace)).world
    kpools = {p.name: p for p in karpenter.pools}
    assert kpools["l40s-infer"].karpenter and kpools["l40s-infer"].unneeded_s == 3600
    assert kpools["a10g-spot"].unneeded_s == 600 and not kpools["a10g-shared"].karpenter
    assert not any(q.checked for q in karpenter.queues)


def test_a_run_ends_when_only_retries_are_left_after_a_block_closes() -> None:
    """A block from 0 to 1000 behind a ProvisioningRequest check, waitForPodsReady 300 s: the long job is
    stopped at 1000, queues again and gets its quota back on the block's flavor, but its request can never be
    provisioned. Kueue and the autoscaler would retry for ever; the run ends once a whole retry cycle passed
    with nothing started, and a job elsewhere still runs to its end first."""
    block = Pool("a", (0,), provision_s=600, window=(0.0, 1000.0))
    other = Pool("b", (1,), provision_s=600)
    c = Cluster.build(["a-0", "b-0"], [64000] * 2, [262144] * 2, [4] * 2, ["a", "b"])
    queues = (Queue("t", ("a",), {"a": 4}, checked=("a",)), Queue("u", ("b",), {"b": 4}))
    wl = Workload.build([1000] * 2, [1024] * 2, [4, 4], [MILLI] * 2, ["a", "b"])
    work = Jobs(np.array([0.0, 1500.0]), np.array([5000.0, 100.0]), np.ones(2, dtype=np.int64),
                np.array([0, 1]), np.full(2, 100, dtype=np.int64), wl)  # fmt: skip
    sim = Simulation(World(c, (block, other), queues, work, Settings(pods_ready_timeout_s=300)), check=True)
    cycles = [0]

    def count(t: float) -> None:
        cycles[0] += 1
        assert cycles[0] < 100_000, "the run does not end"

    sim.after_cycle = count  # type: ignore[method-assign]
    r = sim.run()
    assert r.preemptions == 1  # the block's end stopped the long job
    assert r.waits["u"] == [600.0]  # the other pool's job booted its node and ran
    assert r.makespan_s == 2200.0 and r.never_started == 0
