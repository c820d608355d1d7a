"""Which admitted jobs a job may preempt to be admitted, computed over a quota snapshot and returned.

- **Preemption** (the ClusterQueue's `preemption`): with `reclaimWithinCohort: Any`, a job that fits its own
  nominal quota takes it back from queues that borrow in that pool, lowest priority and most recently
  admitted first; with `withinClusterQueue: LowerPriority`, a job may evict lower-priority jobs of its own
  queue; with `borrowWithinCohort: LowerPriority` (`Settings.borrow_within_cohort_max_priority`), a job that
  would borrow may still take back lent quota from work of lower priority at most the threshold. Candidates
  are taken as Kueue orders them (v0.19.2 `preemption/common/ordering.go`): other queues'
  first, then lower priority, then the most recently admitted. A preempted job loses its run (the GPU-hours
  it had are counted as thrown away) and is requeued with its place in the queue kept: Kueue orders a
  preempted Workload by its creation time (v0.19.2 pkg/workload `Ordering.GetQueueOrderTimestamp`; only a
  `waitForPodsReady` timeout with `requeuingStrategy.timestamp: Eviction` sends a job to the back). Eviction
  is instant: the victims' quota is free for the preemptor in the same cycle (on a cluster their pods take
  their termination grace period first).

Kueue computes the targets over a snapshot of the cache and issues them elsewhere (v0.19.2
pkg/scheduler/preemption/preemption.go: `classicalPreemptions` computes, `IssuePreemptions` applies); so here:
:func:`select_victims` reads a :class:`~scheduler.sim.dynamic.quota.Quota` and changes nothing, the engine
evicts what it returns.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from scheduler.sim.dynamic.admitted import Admitted, Held
from scheduler.sim.dynamic.model import Settings
from scheduler.sim.dynamic.quota import Quota


@dataclass(frozen=True, eq=False)
class Workloads:
    """The jobs as preemption sees them: each one's queue and priority, and what each admitted one holds."""

    queue: np.ndarray
    priority: np.ndarray
    held: Sequence[Held]


class Victim(NamedTuple):
    job: int
    reason: str  # as Kueue names it in the `Preempted` condition


def candidates_ordering(candidates: Iterable[int], q: int, workloads: Workloads) -> list[int]:
    """``candidates`` in the order Kueue tries them for a preemptor of queue ``q``.

    Kueue v0.19.2 pkg/scheduler/preemption/common/ordering.go `CandidatesOrdering` criteria:

    0. Workloads already marked for preemption first (none here: eviction is instant).
    1. Workloads from other ClusterQueues in the cohort before the ones in the same ClusterQueue as the
       preemptor.
    2. (AdmissionFairSharing only) Workloads with lower LocalQueue's usage first (not modelled).
    3. Workloads with lower priority first.
    4. Workloads admitted more recently first.

    Ties (Kueue compares UIDs, an arbitrary but fixed order) go to the later job index first."""
    queue, priority, held = workloads.queue, workloads.priority, workloads.held
    return sorted(candidates, key=lambda v: (int(queue[v]) == q, int(priority[v]), -held[v].admitted_at, -v))


def select_victims(
    quota: Quota,
    settings: Settings,
    workloads: Workloads,
    j: int,
    p: int,
    need: int,
    candidates: Admitted | Iterable[int],
) -> list[Victim]:
    """The jobs to evict so that job ``j`` fits ``need`` units in pool ``p``, among ``candidates`` (the jobs
    admitted in ``p``: the engine's :class:`~scheduler.sim.dynamic.admitted.Admitted` index of them, or any
    iterable, indexed here), if Kueue's rules allow enough of them; empty otherwise. Reads ``quota``, changes
    nothing.

    As Kueue's classical preemption (v0.19.2 pkg/scheduler/preemption/preemption.go classicalPreemptions,
    classical/hierarchical_preemption.go, classical/candidate_generator.go). Each candidate of another
    queue (one that borrows in the pool) is classified: if ``j`` fits within its own queue's nominal quota
    it reclaims with any priority (`InCohortReclamation`); otherwise, under `borrowWithinCohort:
    LowerPriority`, a candidate of lower priority than ``j`` and at most `maxPriorityThreshold` may be
    taken while ``j`` borrows (`InCohortReclaimWhileBorrowing`); any other may be taken only if ``j`` then
    fits within its nominal quota. The candidates, in :func:`candidates_ordering`, are taken one by one until
    ``j`` fits, a candidate of another queue only while that queue still borrows; first allowing ``j`` to
    borrow (skipping the candidates that forbid it), then, failing that, requiring it not to borrow; victims
    that turn out not to be needed are given back, the last taken first (fillBackWorkloads). Stacks with fair
    sharing get Kueue's fairPreemptions instead (:mod:`~scheduler.sim.dynamic.fair_preemption`)."""
    s = settings
    if not s.reclaim_within_cohort and not s.preempt_lower_priority:
        return []
    queue, priority, held = workloads.queue, workloads.priority, workloads.held
    index = candidates if isinstance(candidates, Admitted) else Admitted.of(candidates, queue, priority, held)
    q, prio = int(queue[j]), int(priority[j])
    threshold = s.borrow_within_cohort_max_priority
    usage, nominal = quota.usage, quota.nominal
    # hierarchical advantage: the request fits the queue's own quota (cache/scheduler QuantitiesFitInQuota)
    advantage = usage[q, p] + need <= nominal[q, p]
    # The candidates, a (queue, priority) group at a time: each group's reason, and whether it may be taken
    # only if ``j`` then does not borrow (ReclaimWithoutBorrowing)
    groups: list[tuple[int, int, str, bool]] = []
    for qv, pv in index.groups:
        if qv == q:
            if s.preempt_lower_priority and pv < prio:
                groups.append((qv, pv, "InClusterQueue", False))
        elif s.reclaim_within_cohort and usage[qv, p] > nominal[qv, p]:
            if not advantage and threshold is not None and pv < prio and pv <= threshold:
                groups.append((qv, pv, "InCohortReclaimWhileBorrowing", False))
            else:
                groups.append((qv, pv, "InCohortReclamation", not advantage))
    if not groups:
        return []
    others = any(qv != q for qv, _, _, _ in groups)
    # preemption.go: only its own queue's candidates, or the borrowWithinCohort attempts, borrowing first
    forbidden = threshold is None  # borrowWithinCohort: Never (Kueue's default)
    if not others or (forbidden and not usage[q, p] < nominal[q, p]):
        attempts = [True]
    elif forbidden and not advantage:
        attempts = [False, True]
    else:
        attempts = [True, False]

    def fits(u: np.ndarray, borrowing: bool) -> bool:
        if not borrowing and u[q] + need > nominal[q, p]:
            return False
        return quota.fits_after(q, p, need, u)

    for borrowing in attempts:
        taken = _take(index, groups, q, p, borrowing, usage[:, p].copy(), nominal, held, fits)
        if taken is None:
            continue
        victims, left = taken
        for v, _ in reversed(victims[:-1]):  # fill back what is not needed, the last taken stays
            back = left.copy()
            back[int(queue[v])] += held[v].units
            if fits(back, borrowing):
                victims = [x for x in victims if x[0] != v]
                left = back
        return [Victim(v, reason) for v, reason in victims]
    return []


def _take(
    index: Admitted,
    groups: list[tuple[int, int, str, bool]],
    q: int,
    p: int,
    borrowing: bool,
    left: np.ndarray,
    nominal: np.ndarray,
    held: Sequence[Held],
    fits: Callable[[np.ndarray, bool], bool],
) -> tuple[list[tuple[int, str]], np.ndarray] | None:
    """One attempt: the candidates taken in :func:`candidates_ordering` (a merge of the groups' most recent
    ends) until ``j`` fits, a candidate of another queue only while that queue still borrows; None if they never
    make it fit. ``left`` (the pool's usage column) is updated as jobs are taken."""
    heap: list[tuple[bool, int, float, int, int, int]] = []
    members: list[list[tuple[float, int]]] = []
    for qv, pv, _, only_within_nominal in groups:
        if borrowing and only_within_nominal:
            continue
        group = index.groups[(qv, pv)]
        at, v = group[-1]
        heap.append((qv == q, pv, -at, -v, len(members), len(group) - 1))
        members.append(group)
    heapq.heapify(heap)
    kept = [g for g in groups if not (borrowing and g[3])]
    victims: list[tuple[int, str]] = []
    while heap:
        same, pv, _, neg_v, k, i = heapq.heappop(heap)
        qv = kept[k][0]
        if not same and left[qv] <= nominal[qv, p]:
            continue  # candidateIsValid: that queue no longer borrows (and never will again in this attempt)
        v = -neg_v
        victims.append((v, kept[k][2]))
        left[qv] -= held[v].units
        if fits(left, borrowing):
            return victims, left
        if i > 0:
            at, u = members[k][i - 1]
            heapq.heappush(heap, (same, pv, -at, -u, k, i - 1))
    return None
