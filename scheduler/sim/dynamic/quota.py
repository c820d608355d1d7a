"""Each queue's quota and what it holds, per pool: the arithmetic of Kueue's admission by quota.

Kueue "Cluster Queue" (v0.19.2): a ClusterQueue has, per flavor (here a pool), a nominal quota, a
`borrowingLimit` on what it may take beyond it from the cohort's unused quota, and a `lendingLimit` on what of
its own unused quota it lends; quota the owner keeps back below its lending limit is never lent. Admission
looks at quota alone, never at nodes. Counts are in each pool's units (``scheduler.sim.dynamic.model``).

:class:`Quota` holds the arrays (rows: queues, columns: pools) and answers the checks admission and
preemption ask: does a job fit the queue's nominal quota, would it borrow, how much could the queue still take;
the engine books an admission or a release here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from scheduler.sim.dynamic.model import World

UNLIMITED = 10**12  # a borrowing limit that is not set


@dataclass(eq=False)
class Quota:
    """Quota and usage per (queue, pool), in the pool's units; ``flavors`` per queue, the pools in the order
    Kueue tries them."""

    nominal: np.ndarray  # nominalQuota
    borrow: np.ndarray  # borrowingLimit (UNLIMITED: none)
    lend: np.ndarray  # what the queue lends at most: lendingLimit, capped at its nominal quota
    capacity: np.ndarray  # per pool: its units with every node up, what a cohort can lend at most
    usage: np.ndarray  # units admitted jobs hold
    flavors: list[list[int]]

    @classmethod
    def of(cls, world: World, pool_index: dict[str, int]) -> Quota:
        """The quota of ``world``'s queues, nothing used yet; ``pool_index`` maps a pool's name to its column."""
        n_pools, n_queues = len(world.pools), len(world.queues)
        nominal = np.zeros((n_queues, n_pools), dtype=np.int64)
        borrow = np.zeros((n_queues, n_pools), dtype=np.int64)
        lend = np.zeros((n_queues, n_pools), dtype=np.int64)
        flavors: list[list[int]] = []
        for q, queue in enumerate(world.queues):
            order = [pool_index[f] for f in queue.flavors if f in pool_index]
            flavors.append(order)
            for p in order:
                name = world.pools[p].name
                nominal[q, p] = queue.nominal.get(name, 0)
                b = queue.borrowing_limit.get(name)
                borrow[q, p] = UNLIMITED if b is None else b
                limit = queue.lending_limit.get(name)
                lend[q, p] = nominal[q, p] if limit is None else min(limit, nominal[q, p])
        capacity = np.array([world.capacity_units(p) for p in world.pools], dtype=np.int64)
        usage = np.zeros((n_queues, n_pools), dtype=np.int64)
        return cls(nominal, borrow, lend, capacity, usage, flavors)

    def within_nominal(self, q: int, p: int, need: int) -> bool:
        """Whether ``need`` more units keep queue ``q`` within its nominal quota in pool ``p``."""
        return bool(self.usage[q, p] + need <= self.nominal[q, p])

    def would_borrow(self, q: int, needs: Iterable[tuple[int, int]]) -> bool:
        """Whether a job of queue ``q`` would borrow: none of its ``needs`` ((pool, units), in the queue's flavor
        order) fits the nominal quota."""
        usage, nominal = self.usage, self.nominal
        return not any(usage[q, p] + need <= nominal[q, p] for p, need in needs)

    def __post_init__(self) -> None:
        # per pool, the fixed columns :meth:`available` reads, as Python ints (it is asked for every head)
        self._own = (self.nominal + self.borrow).T.tolist()
        self._keeps = (self.nominal - self.lend).T.tolist()
        self._capacity = self.capacity.tolist()

    def available(self, q: int, p: int) -> int:
        """Units queue ``q`` could still take in pool ``p``: its own limit and what the cohort can lend."""
        usage = self.usage[:, p].tolist()
        own = self._own[p][q] - usage[q]
        kept = sum(
            max(k - u, 0) for i, (k, u) in enumerate(zip(self._keeps[p], usage, strict=True)) if i != q
        )
        cohort = self._capacity[p] - sum(usage) - kept
        return min(own, cohort)

    def fits_after(self, q: int, p: int, need: int, usage: np.ndarray) -> bool:
        """Whether ``need`` units of queue ``q`` would fit pool ``p`` were its usage column ``usage`` (the
        queues' units in ``p``, e.g. with preemption's victims taken out): :meth:`available` on that column."""
        own = self.nominal[q, p] + self.borrow[q, p] - usage[q]
        kept = np.maximum(self.nominal[:, p] - self.lend[:, p] - usage, 0)
        kept[q] = 0
        return bool(min(own, self.capacity[p] - usage.sum() - kept.sum()) >= need)

    def admit(self, q: int, p: int, units: int) -> None:
        """Book ``units`` of pool ``p`` to queue ``q`` (a job admitted)."""
        self.usage[q, p] += units

    def release(self, q: int, p: int, units: int) -> None:
        """Give back ``units`` of pool ``p`` held by queue ``q`` (a job finished or evicted)."""
        self.usage[q, p] -= units

    def check(self, pool_names: list[str]) -> None:
        """Kueue's quota guarantees: no usage below zero, no pool admitted beyond its capacity, no queue beyond
        its nominal quota plus borrowing limit."""
        if (self.usage < 0).any():
            raise AssertionError("negative quota usage")
        for p, name in enumerate(pool_names):
            if self.usage[:, p].sum() > self.capacity[p]:
                raise AssertionError(f"pool {name}: admitted beyond its capacity")
        if (self.usage > self.nominal + self.borrow).any():
            raise AssertionError("a queue is beyond its nominal quota plus borrowing limit")
