"""Random: a uniformly random feasible node; for a sharing pod, a uniformly random fitting GPU.

score(n) = 0 for every feasible node; the choice draws from the run's seeded generator.
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.model import MILLI
from scheduler.sim.policies.base import Batch, Policy, register


@register
class RandomPolicy(Policy):
    name = "Random"

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        return np.zeros(len(batch.nodes), dtype=np.int64), None

    def choose_node(self, column: np.ndarray, s: int) -> int:
        feasible = np.flatnonzero(column >= 0)
        if len(feasible) == 0:
            return -1
        return int(feasible[self.ctx.rng.integers(len(feasible))])

    def choose_gpus(self, node: int, s: int, share_gpu: int) -> list[int]:
        sh = self.ctx.shapes
        if sh.num_gpu[s] == 1 and sh.gpu_milli[s] < MILLI:
            fitting = np.flatnonzero(self.ctx.state.free_gpu[node] >= sh.gpu_milli[s])
            return [int(fitting[self.ctx.rng.integers(len(fitting))])]
        return super().choose_gpus(node, s, share_gpu)
