"""RoundRobin: the naive strategy, the next node in turn (after the previously chosen one) that fits.

score(n) = 0 for every feasible node; the choice walks the nodes in name order from where it last stopped.
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.policies.base import Batch, Context, Policy, register


@register
class RoundRobinPolicy(Policy):
    name = "RoundRobin"

    def bind(self, ctx: Context) -> None:
        super().bind(ctx)
        self.next = 0

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        return np.zeros(len(batch.nodes), dtype=np.int64), None

    def choose_node(self, column: np.ndarray, s: int) -> int:
        start = self.next
        after = column[start:] >= 0
        i = int(after.argmax())
        if after[i]:
            node = start + i
        else:
            before = column[:start] >= 0
            node = int(before.argmax()) if start else -1
            if node < 0 or not before[node]:
                return -1
        self.next = (node + 1) % len(column)
        return node
