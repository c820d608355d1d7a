"""BestFit: prefer the node left with the least free CPU and GPU after placement.

    score = floor(100 * (1 - 0.5 * (free CPU - CPU request) / 128000 - 0.5 * (free GPU - GPU request) / 8000))

(free GPU = the node's total free milli, GPU request = num_gpu * gpu_milli). The artifact rescales the scores
of the feasible nodes to 0..100 afterwards, which keeps their order.
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.policies.base import CPU_NORM, GPU_NORM, Batch, Policy, register


@register
class BestFitPolicy(Policy):
    name = "BestFit"

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        left = (
            0.5 * (batch.cpu - batch.req_cpu) / CPU_NORM
            + 0.5 * (batch.free_gpu_total - batch.req_gpu) / GPU_NORM
        )
        return np.floor(100 * (1 - left)).astype(np.int64), None
