"""Queues that take a pool from each other (scheduler.sim.dynamic.exchanges): the engine counts every preemption
by pool and the two queues, and a pair that evicted each other both ways at least ``AT_LEAST`` times is named.

The world is the two-pool exchange of tests/sim/test_dynamic_fair_sharing.py (`exchange_world`) with Kueue's
batched requeue (1 s, its `requeueBatchPeriod`), so a requeued job comes back as it would in Kueue, not within
the same instant, and the jobs of pool a running 300 s, as in the twin's world: t1 and t2 at equal shares take
pool a from each other until its jobs end; t2 below t1's share takes it once; under `[LessThanInitialShare]`
nobody takes it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from scheduler.sim.dynamic import Simulation, simulate
from scheduler.sim.dynamic.exchanges import AT_LEAST, Exchange, exchanges
from scheduler.sim.dynamic.report import QueuePreemptions
from tests.sim.test_dynamic_fair_sharing import FAIR, exchange_world

REQUEUED = replace(FAIR, requeue_batch_s=1.0)
STRICT = replace(REQUEUED, fair_preemption_strategies=("LessThanInitialShare",))
A_S = 300.0  # how long the jobs of pool a run


def test_the_result_counts_every_preemption_by_pool_and_the_two_queues() -> None:
    """The counts in the Result are the preemptions the engine issued, each under its pool, the preemptor's
    queue and the victim's, as the `preempting` hook sees them one by one."""
    world, _, _, _ = exchange_world(2, REQUEUED, A_S)
    seen: Counter[tuple[str, str, str]] = Counter()
    queue = world.jobs.queue

    class Hooked(Simulation):
        def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
            names = (world.queues[int(queue[preemptor])].name, world.queues[int(queue[victim])].name)
            seen[(world.pools[pool].name, *names)] += 1

    result = Hooked(world).run()
    counted = {(c.pool, c.preemptor, c.victim): c.count for c in result.preempted_by}
    assert counted == dict(seen)
    assert sum(counted.values()) == result.preemptions
    assert set(counted) == {("a", "t1", "t2"), ("a", "t2", "t1")}


def test_two_borrowers_at_equal_shares_are_named_with_the_counts_each_way() -> None:
    world, _, _, _ = exchange_world(2, REQUEUED, A_S)
    result = simulate(world)
    (found,) = exchanges(result.preempted_by)
    counts = {(c.preemptor, c.victim): c.count for c in result.preempted_by}
    assert (found.pool, {found.first, found.second}) == ("a", {"t1", "t2"})
    assert found.first_evicted == counts[(found.first, found.second)]
    assert found.second_evicted == counts[(found.second, found.first)]
    assert min(found.first_evicted, found.second_evicted) >= AT_LEAST


def test_a_borrower_that_takes_the_pool_once_is_not_named() -> None:
    """t2 below t1's share evicts one of t1's jobs and t1 does not take it back: reclaim, one way."""
    world, _, _, _ = exchange_world(1, REQUEUED, A_S)
    result = simulate(world)
    assert result.preempted_by == (QueuePreemptions("a", "t2", "t1", 1),)
    assert exchanges(result.preempted_by) == ()


def test_under_the_strict_strategy_alone_nobody_is_named() -> None:
    world, _, _, _ = exchange_world(2, STRICT, A_S)
    result = simulate(world)
    assert result.preempted_by == () and exchanges(result.preempted_by) == ()


def test_only_distinct_queues_evicting_each_other_in_one_pool_enough_times_each_way_are_named() -> None:
    """A queue evicting its own jobs, a pair below the bound one way, and two ways split over two pools are not
    exchanges; the queue that evicted more comes first, and pools keep their order."""
    n = AT_LEAST
    counts = [
        QueuePreemptions("a", "x", "x", 5 * n),  # within the queue
        QueuePreemptions("a", "x", "y", n),
        QueuePreemptions("a", "y", "x", n + 40),
        QueuePreemptions("b", "x", "z", n + 30),
        QueuePreemptions("b", "z", "x", n - 1),
        QueuePreemptions("b", "y", "z", 3 * n),  # one way in b ...
        QueuePreemptions("c", "z", "y", 3 * n),  # ... the other in c
        QueuePreemptions("c", "v", "w", n + 2),
        QueuePreemptions("c", "w", "v", n + 2),
    ]
    assert exchanges(counts) == (Exchange("a", "y", "x", n + 40, n), Exchange("c", "v", "w", n + 2, n + 2))
    assert exchanges(counts, at_least=n - 1)[1] == Exchange("b", "x", "z", n + 30, n - 1)
