"""The ProvisioningRequest admission check in the dynamic engine: a job of a checked pool keeps its quota and
starts only once the autoscaler's loop answers its request, and a request not found is retried after the
autoscaler's back-off (cluster-autoscaler 1.35.2's rules, scheduler.provisioning)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.provisioning import Answer, answer, retry_after, turn
from scheduler.sim.dynamic import Jobs, Pool, Queue, Settings, World, simulate
from scheduler.sim.dynamic.engine import RESERVED, Simulation
from scheduler.sim.dynamic.provisioning import first_fit


def cluster(nodes: int, gpus: int = 4) -> Cluster:
    return Cluster.build([f"a-{i}" for i in range(nodes)], [64000] * nodes, [262144] * nodes,
                         [gpus] * nodes, ["a"] * nodes)  # fmt: skip


def jobs(rows: Sequence[tuple[float, float, int, int]], pods: list[int] | None = None) -> Jobs:
    """rows: (arrival s, duration s, GPUs per pod, queue index)."""
    n = len(rows)
    return Jobs(
        arrival=np.array([r[0] for r in rows], dtype=np.float64),
        duration=np.array([r[1] for r in rows], dtype=np.float64),
        pods=np.array(pods or [1] * n, dtype=np.int64),
        queue=np.array([r[3] for r in rows], dtype=np.int64),
        priority=np.full(n, 100, dtype=np.int64),
        workload=Workload.build([1000] * n, [1024] * n, [r[2] for r in rows], [MILLI] * n, ["a"] * n),
    )


CHECKED = Queue("t", ("a",), {"a": 8}, checked=("a",))
UNCHECKED = Queue("t", ("a",), {"a": 8})


def test_a_job_on_free_nodes_waits_for_the_autoscalers_next_loop() -> None:
    """Both nodes up and free: without the check a job arriving at t=3 starts at once; with it, its request is
    answered CapacityIsFound at the autoscaler's next loop (t=10, every 10 s), so it waits 7 s."""
    fixed = Settings(autoscale=False, pods_ready_timeout_s=None)
    rows = [(3, 100, 4, 0)]
    plain = simulate(World(cluster(2), (Pool("a", (0, 1)),), (UNCHECKED,), jobs(rows), fixed), check=True)
    checked = simulate(World(cluster(2), (Pool("a", (0, 1)),), (CHECKED,), jobs(rows), fixed), check=True)
    assert plain.waits["t"] == [0.0]
    assert checked.waits["t"] == [7.0]


def test_a_burst_is_answered_one_request_per_loop() -> None:
    """Three jobs at t=1, room for all: the autoscaler picks one request per loop, so they start at 10, 20
    and 30 s (provisioning_class.go, "Pick 1 ProvisioningRequest")."""
    fixed = Settings(autoscale=False, pods_ready_timeout_s=None)
    r = simulate(World(cluster(3), (Pool("a", (0, 1, 2)),), (Queue("t", ("a",), {"a": 12}, checked=("a",)),),
                       jobs([(1, 100, 4, 0)] * 3), fixed), check=True)  # fmt: skip
    assert sorted(r.waits["t"]) == [9.0, 19.0, 29.0]


def test_a_job_needing_new_nodes_waits_the_loop_and_the_boot_and_gets_them_all_at_once() -> None:
    """An empty pool that boots nodes in 600 s: a 2-pod gang of 4 GPUs per pod arriving at t=0 reserves its
    quota, is provisioned at the first loop (t=10, both nodes at once: best-effort-atomic) and starts when
    the nodes are Ready at 610 s; its whole wait counts."""
    world = World(cluster(3), (Pool("a", (0, 1, 2), provision_s=600, node_price_hour=1.0),), (CHECKED,),
                  jobs([(0, 100, 4, 0)], pods=[2]), Settings(pods_ready_timeout_s=None))  # fmt: skip
    sim = Simulation(world, check=True)
    r = sim.run()
    assert r.waits["t"] == [610.0]
    assert r.node_hours == pytest.approx(2 * (600 + 100 + 600) / 3600)  # two nodes, never the third


def test_a_reserved_job_holds_its_quota_while_it_waits() -> None:
    """While its request waits, the job is QuotaReserved (not admitted): its units count against the queue."""
    world = World(cluster(1), (Pool("a", (0,)),), (Queue("t", ("a",), {"a": 4}, checked=("a",)),),
                  jobs([(1, 100, 4, 0)]), Settings(autoscale=False, pods_ready_timeout_s=None))  # fmt: skip
    sim = Simulation(world, check=True)
    seen = []

    def after(t: float) -> None:
        seen.append((t, sim.jobs[0].state, int(sim.usage.sum())))

    sim.after_cycle = after  # type: ignore[method-assign]
    sim.run()
    assert (1.0, RESERVED, 4) in seen
    assert not any(state == RESERVED for t, state, _ in seen if t >= 10)


def test_a_request_not_found_is_retried_after_the_autoscalers_back_off() -> None:
    """A capacity block whose window opens at t=300, nodes booting in 600 s; a job arrives at t=1. Loop 10:
    no node can come, not found; tried again only 1 min after that answer (loop 80, the first after 70:
    not found), then 2 min after (loop 210: not found), then 4 min after (loop 460): provisioned, Ready at
    1060. Retried at every loop it would have been provisioned at 300 and started at 900."""
    pool = Pool("a", (0,), provision_s=600, window=(300.0, float("inf")))
    world = World(cluster(1), (pool,), (Queue("t", ("a",), {"a": 4}, checked=("a",)),),
                  jobs([(1, 100, 4, 0)]), Settings(pods_ready_timeout_s=None))  # fmt: skip
    sim = Simulation(world, check=True)
    answered: list[float] = []
    not_found = sim.requests.not_found

    def spy(job: int, t: float) -> None:
        answered.append(t)
        not_found(job, t)

    sim.requests.not_found = spy  # type: ignore[method-assign]
    r = sim.run()
    assert answered == [10.0, 80.0, 210.0]
    assert r.waits["t"] == [1059.0]


def test_the_autoscalers_rules() -> None:
    """The rules the twin's stand-in and the engine share: back-off 1, 2, 4, 8 then 10 min; all-or-nothing
    answers; the wrapper orchestrator alternating while both kinds of pods wait."""
    assert [retry_after(n) for n in (1, 2, 3, 4, 5, 6, 5000)] == [60, 120, 240, 480, 600, 600, 600]
    assert retry_after(2, scale=0.1) == pytest.approx(12.0)
    tried: list[bool] = []

    def scale_up() -> bool:
        tried.append(True)
        return True

    assert answer(True, scale_up) is Answer.FOUND and not tried  # no scale-up tried when everything fits
    assert answer(False, lambda: True) is Answer.PROVISIONED
    assert answer(False, lambda: False) is Answer.NOT_FOUND and not Answer.NOT_FOUND.provisioned
    assert turn(False, True, False) == (True, False)  # only requests: served, mode flips
    assert turn(True, False, True) == (False, True)  # only regular pods
    assert turn(False, True, True) == (False, True) and turn(True, True, True) == (True, False)
    assert turn(True, False, False) == (False, True)  # nothing to serve: no flip


def test_first_fit_takes_whole_gpus_and_shares() -> None:
    rooms = [([8000, 8192], [MILLI, MILLI, 500, 0])]
    left = first_fit([(1000, 1024, 2, MILLI), (1000, 1024, 1, MILLI), (1000, 1024, 1, 400)], rooms)
    assert left == [(1000, 1024, 1, MILLI)]  # the 3rd GPU is half taken: no whole GPU left
    assert rooms[0][1] == [0, 0, 100, 0]
