"""What a dynamic run measures beside the first wait, on tiny hand-made clusters whose numbers can be worked out
by hand: total queued time and slowdown, blocked-while-idle split by cause, per-pool rows, GPU speed."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.fgd.model import Cluster
from scheduler.sim.dynamic import Pool, Queue, World, simulate
from tests.sim.test_dynamic import FIXED, cluster, jobs, two_teams


def test_a_preempted_jobs_second_wait_counts_in_its_queued_time() -> None:
    """Team a borrows b's two GPUs at t=0 (four 1-GPU jobs of 100 s); b reclaims them at t=30, and a's two
    preempted jobs run again at t=100: each queued 70 s more, though its first wait was 0. Queued time is
    (0 + 0 + 70 + 70 + 0) / 5 = 28 s on average; the slowdowns are 1, 1, 2, 2 (finished at 200) and 1."""
    rows = [(0, 100, 1, 0)] * 4 + [(30, 100, 2, 1)]
    r = simulate(World(cluster(1), (Pool("a", (0,)),), two_teams(None), jobs(rows), FIXED), check=True)
    assert r.wait_p95_s == 0  # the first waits hide the preemption
    assert r.queued_mean_s == pytest.approx(28.0)
    assert r.slowdown_mean == pytest.approx(1.4)


def test_blocked_by_quota_while_a_node_could_run_it_is_policy() -> None:
    """Quota 2 each, no borrowing: team a's two waiting 1-GPU jobs fit the node's two idle GPUs for 100 s;
    only the quota holds them back."""
    r = simulate(World(cluster(1), (Pool("a", (0,)),), two_teams(0), jobs([(0, 100, 1, 0)] * 4), FIXED))
    assert r.blocked_policy_gpu_hours == pytest.approx(2 * 100 / 3600)
    assert r.blocked_fragmentation_gpu_hours == 0


def test_idle_gpus_no_node_can_use_are_fragmentation() -> None:
    """Two 4-GPU nodes each run a 3-GPU job for 100 s; a 2-GPU job arriving at t=1 has quota, and two GPUs are
    idle, one on each node: no node could run it, so its 99 s of waiting are blocked by fragmentation."""
    rows = [(0, 100, 3, 0), (0, 100, 3, 0), (1, 50, 2, 0)]
    world = World(cluster(2), (Pool("a", (0, 1)),), (Queue("t", ("a",), {"a": 8}),), jobs(rows), FIXED)
    r = simulate(world, check=True)
    assert r.blocked_fragmentation_gpu_hours == pytest.approx(2 * 99 / 3600)
    assert r.blocked_policy_gpu_hours == 0
    assert r.blocked_idle_gpu_hours == pytest.approx(r.blocked_fragmentation_gpu_hours)


def _two_pools(speed_b: float = 1.0) -> tuple[Cluster, tuple[Pool, Pool]]:
    c = Cluster.build(["a-0", "b-0"], [64000] * 2, [262144] * 2, [4, 4], ["a", "b"])
    return c, (Pool("a", (0,)), Pool("b", (1,), speed=speed_b))


def test_a_pool_that_never_receives_work_shows_in_the_per_pool_rows() -> None:
    """A 4-GPU job of 100 s on pool a, none on pool b: a ran 1 run, 400/3600 GPU-h at 100 % of its Ready
    GPU-hours; b shows 0 runs and 0 %."""
    c, pools = _two_pools()
    world = World(c, pools, (Queue("t", ("a", "b"), {"a": 4, "b": 4}),), jobs([(0, 100, 4, 0)]), FIXED)
    a, b = simulate(world, check=True).pools
    assert (a.pool, a.runs, b.pool, b.runs) == ("a", 1, "b", 0)
    assert a.gpu_hours == pytest.approx(400 / 3600) and a.utilisation_ready == pytest.approx(1.0)
    assert b.gpu_hours == 0 and b.utilisation_ready == 0


def test_a_job_runs_its_duration_over_its_pools_speed() -> None:
    """The trace's durations are times on the reference GPU: a 100 s job on a pool of speed 0.5 runs 200 s,
    and its slowdown is 2 though it never waited."""
    c, pools = _two_pools(speed_b=0.5)
    world = World(c, pools, (Queue("t", ("b",), {"b": 4}),), jobs([(0, 100, 4, 0)], pool="b"), FIXED)
    r = simulate(world, check=True)
    assert r.makespan_s == 200 and r.wait_p95_s == 0
    assert r.slowdown_mean == pytest.approx(2.0)
    assert r.pools[1].gpu_hours == pytest.approx(4 * 200 / 3600)
    assert np.isclose(r.gpu_hours, r.pools[1].gpu_hours)
