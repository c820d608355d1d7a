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

from scheduler.fgd.model import MILLI
from scheduler.sim.policies.base import Batch, Policy, register


@register
class GpuPackingPolicy(Policy):
    name = "GpuPacking"

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        k, d = batch.req_num_gpu, batch.req_gpu_milli
        if k == 0:
            return np.zeros(len(batch.nodes), dtype=np.int64), None
        full = (batch.gpu == MILLI).sum(axis=1)
        empty_node = np.maximum(33 - full, full)
        all_free = full == self.ctx.cluster.num_gpu[batch.nodes]
        if d == MILLI:  # whole GPUs: only fully free ones fit, so the chosen ones are k fully free GPUs
            return np.where(all_free, empty_node, max(50 - k, 33)), None
        # a sharing pod: the chosen GPU is the fitting one with the least free milli
        least = np.where(batch.gpu_fit, batch.gpu, MILLI).min(axis=1)
        shared = np.where(least == MILLI, 49, np.maximum(100 - (least * 100 // MILLI) // 10, 50))
        return np.where(all_free, empty_node, shared), None
