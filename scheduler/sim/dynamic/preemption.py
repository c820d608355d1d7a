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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from scheduler.sim.dynamic.model import Settings
from scheduler.sim.dynamic.quota import Quota


class Held(Protocol):
    """What preemption reads of an admitted job: when it was admitted and the units it holds."""

    @property
    def admitted_at(self) -> float: ...

    @property
    def units(self) -> int: ...


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
    candidates: Iterable[int],
) -> list[Victim]:
    """The jobs to evict so that job ``j`` fits ``need`` units in pool ``p``, among ``candidates`` (the jobs
    admitted in ``p``), if Kueue's rules allow enough of them; empty otherwise. Reads ``quota``, changes nothing.

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
    queue, priority = workloads.queue, workloads.priority
    q, prio = int(queue[j]), int(priority[j])
    threshold = s.borrow_within_cohort_max_priority
    usage, nominal = quota.usage, quota.nominal
    # hierarchical advantage: the request fits the queue's own quota (cache/scheduler QuantitiesFitInQuota)
    advantage = usage[q, p] + need <= nominal[q, p]
    reason: dict[int, str] = {}
    # ReclaimWithoutBorrowing: taken only if ``j`` then does not borrow
    only_within_nominal: set[int] = set()
    for v in candidates:
        qv, pv = int(queue[v]), int(priority[v])
        if qv == q:
            if s.preempt_lower_priority and pv < prio:
                reason[v] = "InClusterQueue"
        elif s.reclaim_within_cohort and usage[qv, p] > nominal[qv, p]:
            if not advantage and threshold is not None and pv < prio and pv <= threshold:
                reason[v] = "InCohortReclaimWhileBorrowing"
            else:
                reason[v] = "InCohortReclamation"
                if not advantage:
                    only_within_nominal.add(v)
    if not reason:
        return []
    order = candidates_ordering(reason, q, workloads)
    others = any(int(queue[v]) != q for v in order)
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

    held = workloads.held
    for borrowing in attempts:
        left = usage[:, p].copy()
        victims: list[int] = []
        for v in order:
            qv = int(queue[v])
            if qv != q:
                if borrowing and v in only_within_nominal:
                    continue
                if left[qv] <= nominal[qv, p]:  # candidateIsValid: that queue no longer borrows
                    continue
            victims.append(v)
            left[qv] -= held[v].units
            if fits(left, borrowing):
                break
        else:
            continue
        for v in reversed(victims[:-1]):  # fill back what is not needed, the last taken stays
            back = left.copy()
            back[int(queue[v])] += held[v].units
            if fits(back, borrowing):
                victims.remove(v)
                left = back
        return [Victim(v, reason[v]) for v in victims]
    return []
