"""Fair sharing's arithmetic: each node's dominant resource share, and the order it gives a cycle's heads.

The tree is the one the stack compiles (``scheduler.kueue``): a root Cohort that holds the capacity no team has
as quota, under it one Cohort per team carrying the team's `fairSharing.weight`, and under that the team's
ClusterQueues (weight 1). A queue without a cohort (``Queue.cohort == ""``) hangs from the root itself with its
own weight. Counts are in each pool's units; a pool is one flavor of its GPU resource (``Pool.resource``).

- **Dominant resource share** (Kueue v0.19.2 pkg/cache/scheduler/fair_sharing.go `dominantResourceShare`):
  per flavor-resource, what a node uses beyond its subtree quota; summed per resource name over flavors; over
  what the root can lend of that resource (`calculateLendable`, i.e. `potentialAvailable` of the node's
  parent, which for this tree is the root's subtree quota); ×1000; the largest over resources, divided by
  the node's weight. A ClusterQueue's subtree quota is its nominal quota; a Cohort's is what its queues lend
  (nominal minus the `localQuota` a lending limit keeps back), and its usage what they use beyond their
  local quota (pkg/cache/scheduler/resource_node.go `accumulateFromChild`, `localQuota`).
- **Comparison** (fair_sharing.go `CompareDRS`): a node with weight 0 that borrows ranks above every other;
  otherwise the weighted shares compare.
- **Admission order** (pkg/scheduler/fair_sharing_iterator.go `runTournament`, `entryComparer.less`,
  `computeDRS`): each pop runs a tournament from the root; at every Cohort its children's nominees compete by
  (1) not borrowing, after the nominee's admission, on a flavor the nominee requests
  (`FairSharingPrioritizeNonBorrowing`, on by default), (2) the lower share of the child after the nominee's
  admission, (3) higher priority (`PrioritySortingWithinCohort`), (4) earlier queue-order time. The shares
  are recomputed at every pop, so each admission counts for the next.

Only the GPU resource of each pool is counted: CPU and memory quotas, which Kueue also weighs, are left out
(the simulation does not track them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.sim.dynamic.model import World
from scheduler.sim.dynamic.quota import Quota

ROOT = -1  # the cohort index of a queue that hangs from the root


@dataclass(frozen=True)
class Share:
    """A node's dominant resource share (Kueue's `DRS`): the unweighted ratio (‰ of the lendable resource), the
    weight, and the pools it borrows in."""

    ratio: float
    weight: float
    borrowing: frozenset[int]

    def key(self) -> tuple[int, float]:
        """Sorts as `CompareDRS` compares: lower is fairer to admit, higher first to preempt."""
        if self.weight == 0 and self.ratio > 0:
            return (1, self.ratio)
        return (0, 0.0 if self.ratio == 0 else self.ratio / self.weight)


@dataclass(frozen=True)
class Entry:
    """A head nominated in this cycle: job, queue, the pool its assignment uses, units, priority, queue time."""

    job: int
    queue: int
    pool: int
    units: int
    priority: int
    queued_at: float


@dataclass(frozen=True, eq=False)
class Tree:
    """The cohort tree of a world's queues: which team Cohort holds each queue and every node's weight."""

    cohort_of: np.ndarray  # per queue: index into ``cohorts``, ROOT for a queue under the root
    cohorts: tuple[str, ...]
    queue_weight: np.ndarray  # a ClusterQueue's own weight (1 inside a team cohort)
    cohort_weight: np.ndarray
    resource_of: np.ndarray  # per pool: index of its resource name
    n_resources: int

    @classmethod
    def of(cls, world: World) -> Tree:
        cohorts = tuple(dict.fromkeys(q.cohort for q in world.queues if q.cohort))
        cohort_of = np.array([cohorts.index(q.cohort) if q.cohort else ROOT for q in world.queues])
        cohort_weight = np.ones(len(cohorts))
        queue_weight = np.ones(len(world.queues))
        for i, q in enumerate(world.queues):
            if q.cohort:
                cohort_weight[cohorts.index(q.cohort)] = q.weight
            else:
                queue_weight[i] = q.weight
        names = [p.resource or p.name for p in world.pools]
        resources = list(dict.fromkeys(names))
        resource_of = np.array([resources.index(n) for n in names], dtype=np.int64)
        return cls(cohort_of, cohorts, queue_weight, cohort_weight, resource_of, len(resources))

    def members(self, c: int) -> np.ndarray:
        """The queues of cohort ``c``."""
        return np.flatnonzero(self.cohort_of == c)


class Shares:
    """Shares of the tree's nodes over a :class:`Quota`'s usage (or a usage matrix given in its place)."""

    def __init__(self, tree: Tree, quota: Quota) -> None:
        self.tree, self.quota = tree, quota
        self.local = quota.nominal - quota.lend  # localQuota: what a lending limit keeps back
        lend = quota.lend.sum(axis=0) + np.maximum(quota.capacity - quota.nominal.sum(axis=0), 0)
        # calculateLendable: the root's subtree quota per flavor, summed per resource name
        self.lendable = np.bincount(tree.resource_of, weights=lend, minlength=tree.n_resources)

    def _share(self, borrowed: np.ndarray, weight: float) -> Share:
        per = np.bincount(self.tree.resource_of, weights=borrowed, minlength=self.tree.n_resources)
        ok = self.lendable > 0
        ratio = float((per[ok] * 1000.0 / self.lendable[ok]).max()) if ok.any() else 0.0
        return Share(ratio, weight, frozenset(np.flatnonzero(borrowed > 0).tolist()))

    def queue(self, q: int, usage: np.ndarray | None = None) -> Share:
        """ClusterQueue ``q``'s share: its usage beyond its nominal quota."""
        u = self.quota.usage if usage is None else usage
        borrowed = np.maximum(u[q] - self.quota.nominal[q], 0)
        return self._share(borrowed, float(self.tree.queue_weight[q]))

    def cohort(self, c: int, usage: np.ndarray | None = None) -> Share:
        """Team cohort ``c``'s share: its queues' usage beyond their local quota, over what they lend."""
        u = self.quota.usage if usage is None else usage
        qs = self.tree.members(c)
        used = np.maximum(u[qs] - self.local[qs], 0).sum(axis=0)
        borrowed = np.maximum(used - self.quota.lend[qs].sum(axis=0), 0)
        return self._share(borrowed, float(self.tree.cohort_weight[c]))

    def top(self, q: int, usage: np.ndarray | None = None) -> Share:
        """The share of ``q``'s node just under the root: its cohort, or the queue itself."""
        c = int(self.tree.cohort_of[q])
        return self.queue(q, usage) if c == ROOT else self.cohort(c, usage)

    def next_entry(self, entries: Sequence[Entry]) -> Entry:
        """The entry the fair-sharing iterator pops next: the tournament's winner at the root (`runTournament`),
        each child's share computed with its nominee admitted (`computeDRS`)."""
        usage = self.quota.usage
        nominees: list[tuple[tuple[object, ...], Entry]] = []
        by_cohort: dict[int, list[tuple[tuple[object, ...], Entry]]] = {}
        for e in entries:
            after = usage.copy()
            after[e.queue, e.pool] += e.units
            c = int(self.tree.cohort_of[e.queue])
            at_queue = self._rank(self.queue(e.queue, after), e)
            if c == ROOT:
                nominees.append((at_queue, e))
            else:
                by_cohort.setdefault(c, []).append((at_queue, e))
        for c, children in by_cohort.items():
            _, e = min(children, key=lambda ke: ke[0])
            after = usage.copy()
            after[e.queue, e.pool] += e.units
            nominees.append((self._rank(self.cohort(c, after), e), e))
        return min(nominees, key=lambda ke: ke[0])[1]

    @staticmethod
    def _rank(share: Share, e: Entry) -> tuple[object, ...]:
        """`entryComparer.less` as a sort key: not borrowing on the nominee's flavor, share, priority, FIFO."""
        return (e.pool in share.borrowing, share.key(), -e.priority, e.queued_at, e.job)
