"""LeastAllocated: kube-scheduler's default NodeResourcesFit strategy (spreading).

Per resource r in (cpu, memory, nvidia.com/gpu): score_r = (allocatable - requested - pod) * 100 // allocatable;
score = sum(score_r * w_r) // sum(w_r). Default weights: cpu 1, memory 1, nvidia.com/gpu 1.
"""

from __future__ import annotations

from scheduler.sim.policies.base import register
from scheduler.sim.policies.node_resources_fit import NodeResourcesFitPolicy, least_requested


@register
class LeastAllocatedPolicy(NodeResourcesFitPolicy):
    name = "LeastAllocated"
    scorer = staticmethod(least_requested)
