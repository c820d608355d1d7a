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
        # the artifact's order of operations: (free - request) / capacity_max * 0.5 per resource, summed;
        # x / 128000 * 0.5 == x / 256000 exactly in binary floating point, and scores of feasible nodes are >= 0
        left = (batch.cpu - batch.req_cpu) / (2 * CPU_NORM) + (batch.free_gpu_total - batch.req_gpu) / (
            2 * GPU_NORM
        )
        return ((1.0 - left) * 100).astype(np.int64), None
