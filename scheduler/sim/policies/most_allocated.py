"""MostAllocated: NodeResourcesFit bin-packing with nvidia.com/gpu weighted (this toolkit's packing profile).

Per resource r in (cpu, memory, nvidia.com/gpu): score_r = (requested + pod) * 100 // allocatable;
score = sum(score_r * w_r) // sum(w_r). Default weights: cpu 1, memory 1, nvidia.com/gpu 10.
"""

from __future__ import annotations

from types import MappingProxyType

from scheduler.sim.policies.base import register
from scheduler.sim.policies.node_resources_fit import GPU, NodeResourcesFitPolicy, most_requested


@register
class MostAllocatedPolicy(NodeResourcesFitPolicy):
    name = "MostAllocated"
    scorer = staticmethod(most_requested)
    default_weights = MappingProxyType({"cpu": 1, "memory": 1, GPU: 10})
