"""LeastAllocated: kube-scheduler's default NodeResourcesFit strategy (spreading).

Per resource r in (cpu, memory, nvidia.com/gpu): score_r = (allocatable - requested - pod) * 100 // allocatable;
score = sum(score_r * w_r) // sum(w_r). Default weights: cpu 1, memory 1, nvidia.com/gpu 1.
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.policies.base import register
from scheduler.sim.policies.node_resources_fit import NodeResourcesFitPolicy


@register
class LeastAllocatedPolicy(NodeResourcesFitPolicy):
    name = "LeastAllocated"

    def numerator(self, free: np.ndarray, cap: np.ndarray, request: np.ndarray) -> np.ndarray:
        # allocatable - requested - pod = free - pod (never negative on a node the pod fits)
        return free - request
