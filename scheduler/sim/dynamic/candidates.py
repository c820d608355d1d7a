"""A ClusterQueue's candidates for the heads of one admission pass, in Kueue's order.

Kueue takes a queue's next head from its waiting workloads in order (priority, then queueing time), skipping
those it holds as inadmissible: a shape parked until the batched requeue, or one no smaller than a job of the
same queue, pools and priority that failed in this pass (:meth:`Simulation._cycle`). Whether a job is skipped
depends only on its shape, and within a pass a skipped shape stays skipped. So when every waiting job is
tried again (quota was freed), the candidates are merged from one sorted list per shape, and a skipped
shape's jobs are passed over together instead of one by one: under load most waiting jobs belong to parked
shapes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

Entry = tuple[int, float, int]  # (-priority, queueing time, job): a queue's order
Skip = Callable[[int], bool]  # whether a job's shape is skipped now
Waits = Callable[[int], bool]  # whether a job still waits (it may have been admitted earlier in the pass)


class InOrder:
    """Candidates from one list in order, each job's skip asked on its own (a StrictFIFO queue ends at its first
    waiting job that is skipped, as Kueue blocks it there)."""

    def __init__(self, jobs: list[int], strict: bool) -> None:
        self.rest = jobs[::-1]  # popped from the end
        self.strict = strict

    def head(self, waits: Waits, skip: Skip) -> int:
        """The next head, or -1 when none is left."""
        rest = self.rest
        while rest:
            j = rest.pop()
            if not waits(j):
                continue
            if skip(j):
                if self.strict:
                    rest.clear()
                continue
            return j
        return -1

    def __bool__(self) -> bool:
        return bool(self.rest)


class ByShape:
    """Candidates merged from each shape's sorted waiting list (copied: jobs requeued during the pass are not
    among them, as with a list taken at its start); a shape found skipped is dropped whole."""

    def __init__(self, by_shape: dict[int, list[Entry]], parked: set[int]) -> None:
        self.lists = {s: entries.copy() for s, entries in by_shape.items() if s not in parked and entries}
        self.heap = [(entries[0], s, 0) for s, entries in self.lists.items()]
        heapq.heapify(self.heap)

    def head(self, waits: Waits, skip: Skip) -> int:
        """The next head, or -1 when none is left."""
        heap, lists = self.heap, self.lists
        while heap:
            entry, s, i = heap[0]
            j = entry[2]
            if waits(j) and skip(j):
                heapq.heappop(heap)  # every later job of the shape is skipped too
                continue
            entries = lists[s]
            if i + 1 < len(entries):
                heapq.heapreplace(heap, (entries[i + 1], s, i + 1))
            else:
                heapq.heappop(heap)
            if waits(j):
                return j
        return -1

    def __bool__(self) -> bool:
        return bool(self.heap)
