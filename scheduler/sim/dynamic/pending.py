"""A pool's admitted jobs whose pods wait to be placed, in the order placement tries them, and the same jobs by
pod shape.

Placement tries a pool's pending jobs in the order they came, passing over those whose pod shape last found no
room while the pool's room has not grown since (the engine's ``full``). Under load most of a pool's pending jobs
are of such shapes, and their number grows with the cluster, so a pass that visits every job to pass over it
costs the pool's whole queue at every instant. Kept per shape as well, a pass visits only the shapes that may
find room, merging their jobs by arrival order, and stops visiting a shape once one of its pods finds none: the
same jobs are tried, in the same order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator


class Pending:
    """One pool's pending jobs: each with its place in the order (a number that only grows), in that order, and
    per pod shape the same, in the same order; and what their pods not yet placed ask, in the pool's units
    (``asked``, summed as jobs come, go and place pods: the autoscaler reads it at every instant)."""

    __slots__ = ("_asked", "_by_shape", "_jobs", "_next", "asked")

    def __init__(self) -> None:
        self._jobs: dict[int, int] = {}  # job -> its place in the order, in insertion (= that) order
        self._by_shape: dict[int, dict[int, int]] = {}  # pod shape -> its jobs, as above
        self._next = 0
        self._asked: dict[int, int] = {}  # job -> the units its pods not yet placed ask
        self.asked = 0

    def __iter__(self) -> Iterator[int]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, j: object) -> bool:
        return j in self._jobs

    def add(self, j: int, shape: int, asked: int = 0) -> None:
        """Job ``j`` (pods of ``shape``, asking ``asked`` units) joins at the end."""
        self._jobs[j] = self._next
        self._by_shape.setdefault(shape, {})[j] = self._next
        self._next += 1
        self._asked[j] = asked
        self.asked += asked

    def ask(self, j: int, asked: int) -> None:
        """Job ``j``'s pods not yet placed now ask ``asked`` units."""
        self.asked += asked - self._asked[j]
        self._asked[j] = asked

    def remove(self, j: int, shape: int) -> None:
        del self._jobs[j]
        self.asked -= self._asked.pop(j)
        group = self._by_shape[shape]
        del group[j]
        if not group:
            del self._by_shape[shape]

    def open_jobs(self, is_open: Callable[[int], bool]) -> Iterator[int]:
        """The jobs in order, of the shapes for which ``is_open`` holds, asked before each of the shape's jobs (a
        shape that turns closed is not visited again). The jobs must not change while this runs."""
        heads: list[tuple[int, int, int, Iterator[tuple[int, int]]]] = []
        for shape, group in self._by_shape.items():
            if is_open(shape):
                rest = iter(group.items())
                j, at = next(rest)
                heads.append((at, shape, j, rest))
        heapq.heapify(heads)  # places are distinct: the iterators are never compared
        while heads:
            _, shape, j, rest = heads[0]
            yield j
            after = next(rest, None) if is_open(shape) else None
            if after is None:
                heapq.heappop(heads)
            else:
                heapq.heapreplace(heads, (after[1], shape, after[0], rest))
