"""DotProd (Tetris-style alignment): prefer the node whose free resources point least in the pod's direction.

node = (free CPU / 128000, free GPU milli / 8000),  pod = (CPU request / 128000, num_gpu*gpu_milli / 8000)
score = floor(100 * (1 - node . pod / 2))
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.policies.base import CPU_NORM, GPU_NORM, Batch, Policy, register


@register
class DotProdPolicy(Policy):
    name = "DotProd"

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        dot = (batch.cpu / CPU_NORM) * (batch.req_cpu / CPU_NORM) + (batch.free_gpu_total / GPU_NORM) * (
            batch.req_gpu / GPU_NORM
        )
        return np.floor(100 * (1 - dot / 2)).astype(np.int64), None
