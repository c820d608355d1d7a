"""Random: a uniformly random feasible node; for a sharing pod, a uniformly random fitting GPU (under DRA's
`first-fit` share rule the allocator's GPU: the policy chooses only the node there).

score(n) = 0 for every feasible node; the choice draws from the run's seeded generator.
"""

from __future__ import annotations

import numpy as np

from scheduler.fgd.model import MILLI
from scheduler.sim.policies.base import Batch, Context, Policy, register


@register
class RandomPolicy(Policy):
    name = "Random"
    uses_share_gpu = False  # a random fitting GPU is drawn at placement

    def bind(self, ctx: Context) -> None:
        super().bind(ctx)
        self._uniform = np.empty(0)
        self._next = 0

    def _pick(self, count: int) -> int:
        """A uniform index in range(count), from uniforms drawn in blocks (one rng call per 4096 picks)."""
        if self._next == len(self._uniform):
            self._uniform, self._next = self.ctx.rng.random(4096), 0
        u = self._uniform[self._next]
        self._next += 1
        return min(int(u * count), count - 1)

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        return np.zeros(len(batch.nodes), dtype=np.int64), None

    def choose_node(self, column: np.ndarray, s: int) -> int:
        feasible = np.flatnonzero(column >= 0)
        if len(feasible) == 0:
            return -1
        return int(feasible[self._pick(len(feasible))])

    def choose_gpus(self, node: int, s: int, share_gpu: int) -> list[int]:
        sh = self.ctx.shapes
        if sh.num_gpu[s] == 1 and sh.gpu_milli[s] < MILLI and self.ctx.share_rule != "first-fit":
            d = int(sh.gpu_milli[s])
            fitting = [g for g, free in enumerate(self.ctx.state.free_gpu[node].tolist()) if free >= d]
            return [fitting[self._pick(len(fitting))]]
        return super().choose_gpus(node, s, share_gpu)
