"""Victim selection (scheduler.sim.dynamic.preemption) on hand-made quota snapshots, no simulation run: the
candidates, their order and the victims Kueue's classical preemption picks, worked out by hand.

Kueue v0.19.2 pkg/scheduler/preemption/common/ordering.go (CandidatesOrdering) and preemption.go
(classicalPreemptions, fillBackWorkloads).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.sim.dynamic import Settings
from scheduler.sim.dynamic.preemption import Victim, Workloads, candidates_ordering, select_victims
from scheduler.sim.dynamic.quota import UNLIMITED, Quota


@dataclass(frozen=True)
class Held:
    admitted_at: float
    units: int


def one_pool(nominal: list[int], usage: list[int], capacity: int) -> Quota:
    """Queues with ``nominal`` units each in one pool of ``capacity`` units, unlimited borrowing, lending all."""
    column = np.array([[n] for n in nominal], dtype=np.int64)
    return Quota(
        nominal=column,
        borrow=np.full_like(column, UNLIMITED),
        lend=column.copy(),
        capacity=np.array([capacity], dtype=np.int64),
        usage=np.array([[u] for u in usage], dtype=np.int64),
        flavors=[[0] for _ in nominal],
    )


def test_candidates_go_other_queues_first_then_lower_priority_then_the_most_recently_admitted() -> None:
    """CandidatesOrdering criteria 1, 3 and 4 for a preemptor of queue 0: job 0 (queue 0, priority 10) comes
    last though its priority is the lowest; of queue 1's, priority 100 before 1000, and of the two at 100 the
    one admitted at t=50 before the one admitted at t=20."""
    workloads = Workloads(
        queue=np.array([0, 1, 1, 1, 0]),
        priority=np.array([10, 1000, 100, 100, 1000]),
        held=[Held(90.0, 1), Held(99.0, 1), Held(20.0, 1), Held(50.0, 1), Held(0.0, 1)],
    )
    assert candidates_ordering([0, 1, 2, 3], 0, workloads) == [3, 2, 1, 0]


def test_reclaim_takes_back_the_fewest_borrowed_jobs_and_fills_back_the_rest() -> None:
    """Two queues of 4 units nominal in an 8-unit pool; queue 1 holds 7 (borrows 3) as job 1 (3 units,
    admitted at t=0), job 2 (3 units, t=5), job 3 (1 unit, t=10). Job 0 of queue 0 asks 4, within its nominal
    quota, so it reclaims with any priority (InCohortReclamation). Most recent first: job 3 (1 unit: 2 free,
    not enough), then job 2 (3 units: 5 free, enough). Fill back, from the last taken but one: giving job 3
    back leaves 4 free, still enough, so job 3 stays admitted and job 2 alone is preempted. Job 1 is never
    reached."""
    quota = one_pool(nominal=[4, 4], usage=[0, 7], capacity=8)
    workloads = Workloads(
        queue=np.array([0, 1, 1, 1]),
        priority=np.array([100, 100, 100, 100]),
        held=[Held(0.0, 0), Held(0.0, 3), Held(5.0, 3), Held(10.0, 1)],
    )
    settings = Settings()
    victims = select_victims(quota, settings, workloads, j=0, p=0, need=4, candidates={1, 2, 3})
    assert victims == [Victim(2, "InCohortReclamation")]
    assert quota.usage.tolist() == [[0], [7]]  # computed over the snapshot, nothing applied


def test_a_queue_within_its_nominal_quota_is_not_a_reclaim_candidate() -> None:
    """reclaimWithinCohort takes quota back only from queues that borrow: queue 1 holds 4 of its nominal 4,
    so job 0 of queue 0 asking 6 of an 8-unit pool (4 free) finds no victim there."""
    quota = one_pool(nominal=[4, 4], usage=[0, 4], capacity=8)
    workloads = Workloads(
        queue=np.array([0, 1]), priority=np.array([1000, 10]), held=[Held(0.0, 0), Held(0.0, 4)]
    )
    assert select_victims(quota, Settings(), workloads, j=0, p=0, need=6, candidates={1}) == []
