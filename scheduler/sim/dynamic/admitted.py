"""The jobs admitted in one pool, indexed as classical preemption reads them: by queue and priority, each
group kept in admission order.

Kueue orders preemption candidates by other queues first, then lower priority, then the most recently admitted
(v0.19.2 `preemption/common/ordering.go`); its candidates are only the queues that borrow and the lower
priorities of the preemptor's own queue. Kept per (queue, priority), the candidates a preemptor may take are a
handful of groups found without looking at a single job, and their order is a merge of the groups' tails. A
scan of every admitted job per preemption attempt grows with jobs x admitted; this index grows with the jobs
taken.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np


class Held(Protocol):
    """What the index reads of an admitted job: when it was admitted and the units it holds."""

    @property
    def admitted_at(self) -> float: ...

    @property
    def units(self) -> int: ...


class Admitted:
    """One pool's admitted jobs: per (queue, priority) the list of (admitted_at, job), ascending."""

    def __init__(self) -> None:
        self.groups: dict[tuple[int, int], list[tuple[float, int]]] = {}

    @classmethod
    def of(
        cls, jobs: Iterable[int], queue: np.ndarray, priority: np.ndarray, held: Sequence[Held]
    ) -> Admitted:
        """An index of ``jobs`` (e.g. a snapshot's admitted jobs in one pool)."""
        index = cls()
        for v in jobs:
            index.add(v, int(queue[v]), int(priority[v]), held[v].admitted_at)
        return index

    def add(self, j: int, q: int, priority: int, admitted_at: float) -> None:
        bisect.insort(self.groups.setdefault((q, priority), []), (admitted_at, j))

    def remove(self, j: int, q: int, priority: int, admitted_at: float) -> None:
        group = self.groups[(q, priority)]
        del group[bisect.bisect_left(group, (admitted_at, j))]
        if not group:
            del self.groups[(q, priority)]
