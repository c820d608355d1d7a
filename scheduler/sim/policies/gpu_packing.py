"""GpuPacking: fill partly used GPUs first, then partly used nodes, then empty nodes.

For a GPU pod on a node with F fully free GPUs, taking the node's GPUs in order of least free milli first
(stable by index) and choosing the first ones that fit:

    score = max(33 - F, F)                    if all the node's GPUs are free
          = max(50 - n, 33)                   if the chosen GPUs include n > 0 fully free ones
          = max(100 - S // 10, 50)            otherwise, S = sum over chosen GPUs of (free milli * 100) // 1000
          = 0                                 for CPU-only pods (every node)
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.model import MILLI
from scheduler.sim.policies.base import Batch, Policy, register


@register
class GpuPackingPolicy(Policy):
    name = "GpuPacking"

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        if batch.req_num_gpu == 0:
            return np.zeros(len(batch.nodes), dtype=np.int64), None
        num_gpu = self.ctx.cluster.num_gpu[batch.nodes]
        full = (batch.gpu == MILLI).sum(axis=1)
        ordered = np.sort(batch.gpu, axis=1)  # least free first; equal values are interchangeable
        fit = ordered >= batch.req_gpu_milli
        chosen = fit & (np.cumsum(fit, axis=1) <= batch.req_num_gpu)
        chosen_full = (chosen & (ordered == MILLI)).sum(axis=1)
        used_share = (chosen * (ordered * 100 // MILLI)).sum(axis=1)
        score = np.where(
            full == num_gpu,
            np.maximum(33 - full, full),
            np.where(
                chosen_full > 0, np.maximum(50 - chosen_full, 33), np.maximum(100 - used_share // 10, 50)
            ),
        )
        return score, None
