"""Which admitted jobs a job may preempt under fair sharing, computed over a quota snapshot and returned.

Kueue v0.19.2 with `fairSharing` configured replaces classical preemption by `fairPreemptions`
(pkg/scheduler/preemption/preemption.go `getTargets`), with the stack's strategies
(``Settings.fair_preemption_strategies``, compiled by ``scheduler.kueue_config``; by default
`[LessThanOrEqualToFinalShare, LessThanInitialShare]`):

- **Candidates** (`findCandidates`): lower-priority jobs of the preemptor's own queue (`withinClusterQueue:
  LowerPriority`) and jobs of **any** priority of every other queue of the root cohort that borrows in the
  pool (`reclaimWithinCohort: Any`, `cqIsBorrowing`), in `CandidatesOrdering` (as classical). The preemptor's
  usage is added first, so every share includes it (`SimulateUsageAddition`).
- **Which queue next** (preemption/fairsharing/ordering.go `nextTarget`): from the root, the child with the
  highest share; a ClusterQueue that does not borrow (other than the preemptor's) or has no candidate left is
  pruned, a Cohort that does not borrow and is not on the preemptor's path too; on equal shares a Cohort
  goes before a ClusterQueue, equal queues by their first candidates' order.
- **The first strategy** (`runFirstFsStrategy`): the preemptor's own lower-priority jobs go unconditionally
  (InClusterQueue); a preemptor within its nominal quota in the pool takes any candidate
  (`FairSharingPreemptWithinNominal`, on by default: InCohortReclamation); otherwise a candidate goes if the
  strategy passes, over shares taken at the children of the two queues' lowest common ancestor
  (least_common_ancestor.go): rule S2-a, the preemptor's share after admission at most the target's share
  after the candidate's removal (fairsharing/strategy.go `LessThanOrEqualToFinalShare`), or rule S2-b as the
  only strategy, the preemptor's share after admission below the target's as it stands
  (`LessThanInitialShare`); after each taken candidate the queue is picked again (InCohortFairSharing). A
  candidate that fails waits for the second strategy, if there is one. Two borrowers whose weighted
  shares are equal, each dominant in a resource other than the pool's, pass this rule both ways: a job of
  the pool moves neither share, so each requeued victim evicts its preemptor in turn, as Kueue's rule
  allows (`CompareDRS(preemptorNewShare, targetNewShare) <= 0`); Kueue, whose preemptor waits for the next
  cycle, re-admits the older victim first and the preemptor evicts it again (docs/simulation.md).
- **The second strategy, rule S2-b** (`runSecondFsStrategy`, run only when a second strategy is configured,
  `fairPreemptions`): over the failed candidates, in a fresh ordering, the first of each queue goes if the
  preemptor's share is below that queue's current share (`LessThanInitialShare`); a queue is dropped after
  one try.
- Each step ends as soon as the preemptor fits by borrowing (`workloadFitsForFairSharing`); then the victims
  not needed are given back, the last taken first (`fillBackWorkloads` with borrowing allowed).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from scheduler.sim.dynamic.fair_sharing import ROOT, Share, Shares
from scheduler.sim.dynamic.model import Settings
from scheduler.sim.dynamic.preemption import Victim, Workloads, candidates_ordering

LOWEST = (-1, -1.0)  # below every Share.key(): `NegativeDRS`


class _Ordering:
    """`TargetClusterQueueOrdering` over a usage matrix the caller changes as it takes victims."""

    def __init__(self, shares: Shares, q: int, usage: np.ndarray, by_queue: dict[int, list[int]],
                 workloads: Workloads) -> None:  # fmt: skip
        self.shares, self.q, self.usage, self.by_queue, self.workloads = shares, q, usage, by_queue, workloads
        self.pruned_queues: set[int] = set()
        self.pruned_cohorts: set[int] = set()
        self.root_pruned = False

    def __iter__(self) -> Iterator[int]:
        while not self.root_pruned:
            target = self._next(ROOT)
            if target is not None:
                yield target

    def drop(self, q: int) -> None:
        self.pruned_queues.add(q)

    def _queue_share(self, q: int) -> Share:
        return self.shares.queue(q, self.usage)

    def _next(self, cohort: int) -> int | None:
        tree = self.shares.tree
        best_q, best_q_key = -1, LOWEST
        for cq in np.flatnonzero(tree.cohort_of == cohort).tolist():
            if cq in self.pruned_queues:
                continue
            share = self._queue_share(cq)
            key = share.key()
            if (not share.borrowing and cq != self.q) or not self.by_queue.get(cq):
                self.pruned_queues.add(cq)
            elif best_q >= 0 and key == best_q_key:
                first = candidates_ordering([self.by_queue[cq][0], self.by_queue[best_q][0]], self.q,
                                            self.workloads)[0]  # fmt: skip
                if first == self.by_queue[cq][0]:
                    best_q = cq
            elif key > best_q_key:
                best_q, best_q_key = cq, key
        best_c, best_c_key = -1, LOWEST
        if cohort == ROOT:
            path = int(tree.cohort_of[self.q])
            for c in range(len(tree.cohorts)):
                if c in self.pruned_cohorts:
                    continue
                share = self.shares.cohort(c, self.usage)
                if not share.borrowing and c != path:
                    self.pruned_cohorts.add(c)
                elif share.key() >= best_c_key:
                    best_c, best_c_key = c, share.key()
        if best_c < 0 and best_q < 0:
            if cohort == ROOT:
                self.root_pruned = True
            else:
                self.pruned_cohorts.add(cohort)
            return None
        if best_c >= 0 and best_c_key >= best_q_key:
            return self._next(best_c)
        return best_q


def _almost_lca_share(shares: Shares, a: int, b: int, usage: np.ndarray) -> Share:
    """Queue ``a``'s share at the child of the lowest common ancestor of queues ``a`` and ``b``."""
    ca = int(shares.tree.cohort_of[a])
    if ca != ROOT and ca == int(shares.tree.cohort_of[b]):
        return shares.queue(a, usage)
    return shares.top(a, usage)


def select_fair_victims(
    shares: Shares,
    settings: Settings,
    workloads: Workloads,
    j: int,
    p: int,
    need: int,
    candidates: Iterable[int],
) -> list[Victim]:
    """The jobs to evict so that job ``j`` fits ``need`` units in pool ``p`` under Kueue's fairPreemptions,
    among ``candidates`` (the jobs admitted in ``p``); empty if the strategies cannot make room. Reads the
    quota, changes nothing."""
    quota = shares.quota
    queue, priority, held = workloads.queue, workloads.priority, workloads.held
    q, prio = int(queue[j]), int(priority[j])
    usage = quota.usage
    own, others = settings.preempt_lower_priority, settings.reclaim_within_cohort
    found = [
        v
        for v in candidates
        if (own and int(queue[v]) == q and int(priority[v]) < prio)
        or (others and int(queue[v]) != q and usage[int(queue[v]), p] > quota.nominal[int(queue[v]), p])
    ]
    if not found:
        return []
    order = candidates_ordering(found, q, workloads)
    u = usage.copy()
    u[q, p] += need  # SimulateUsageAddition: every share includes the preemptor

    def fits() -> bool:  # workloadFitsForFairSharing: without the preemptor's usage, borrowing allowed
        column = u[:, p].copy()
        column[q] -= need
        return quota.fits_after(q, p, need, column)

    within_nominal = u[q, p] <= quota.nominal[q, p]
    first = settings.fair_preemption_strategies[0]
    targets: list[Victim] = []

    def take(v: int, reason: str) -> bool:
        u[int(queue[v]), p] -= held[v].units
        targets.append(Victim(v, reason))
        return fits()

    by_queue: dict[int, list[int]] = {}
    for v in order:
        by_queue.setdefault(int(queue[v]), []).append(v)
    retry: list[int] = []
    done = False
    for t in _Ordering(shares, q, u, by_queue, workloads):
        if t == q or within_nominal:
            done = take(by_queue[t].pop(0), "InClusterQueue" if t == q else "InCohortReclamation")
            if done:
                break
            continue
        preemptor_share = _almost_lca_share(shares, q, t, u).key()
        # ComputeShares: the target's share before any removal, which only LessThanInitialShare reads
        target_share = _almost_lca_share(shares, t, q, u).key() if first == "LessThanInitialShare" else LOWEST
        while by_queue[t]:
            v = by_queue[t].pop(0)
            if first == "LessThanInitialShare":
                passed = preemptor_share < target_share
            else:  # LessThanOrEqualToFinalShare
                after = u.copy()
                after[t, p] -= held[v].units
                passed = preemptor_share <= _almost_lca_share(shares, t, q, after).key()
            if passed:
                done = take(v, "InCohortFairSharing")
                break
            retry.append(v)
        if done:
            break
    if not done and retry and len(settings.fair_preemption_strategies) > 1:
        again: dict[int, list[int]] = {}
        for v in candidates_ordering(retry, q, workloads):
            again.setdefault(int(queue[v]), []).append(v)
        ordering = _Ordering(shares, q, u, again, workloads)
        for t in ordering:
            v = again[t].pop(0)
            # LessThanInitialShare: the preemptor's share below the target's as it stands
            if _almost_lca_share(shares, q, t, u).key() < _almost_lca_share(shares, t, q, u).key():
                done = take(v, "InCohortFairSharing")
                if done:
                    break
            ordering.drop(t)
    if not done:
        return []
    for i in range(len(targets) - 2, -1, -1):  # fillBackWorkloads, borrowing allowed
        v = targets[i].job
        u[int(queue[v]), p] += held[v].units
        if fits():
            del targets[i]
        else:
            u[int(queue[v]), p] -= held[v].units
    return targets
