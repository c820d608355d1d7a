"""MostAllocated: NodeResourcesFit bin-packing with nvidia.com/gpu weighted (this toolkit's packing profile).

Per resource r in (cpu, memory, nvidia.com/gpu): score_r = (requested + pod) * 100 // allocatable;
score = sum(score_r * w_r) // sum(w_r). Default weights: cpu 1, memory 1, nvidia.com/gpu 10.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from scheduler.sim.policies.base import register
from scheduler.sim.policies.node_resources_fit import GPU, NodeResourcesFitPolicy


@register
class MostAllocatedPolicy(NodeResourcesFitPolicy):
    name = "MostAllocated"
    default_weights = MappingProxyType({"cpu": 1, "memory": 1, GPU: 10})

    def numerator(self, free: np.ndarray, cap: np.ndarray, request: np.ndarray) -> np.ndarray:
        # requested + pod = allocatable - free + pod (never above allocatable on a node the pod fits)
        return cap - free + request
