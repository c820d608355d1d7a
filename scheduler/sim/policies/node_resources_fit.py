"""kube-scheduler's NodeResourcesFit scoring, shared by LeastAllocated and MostAllocated.

As upstream (pkg/scheduler/framework/plugins/noderesources): per resource, requested = what the node's pods
request plus this pod's request, allocatable = the node's capacity; a resource with zero allocatable on the
node, or an extended resource (``nvidia.com/gpu``) the pod does not request, is skipped; the node score is
the integer weighted mean ``sum(score_r * w_r) // sum(w_r)`` (0 if nothing is left). GPUs are counted in
milli-GPU, so a sharing pod requests its fraction of a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from scheduler.sim.model import MILLI
from scheduler.sim.policies.base import Batch, Policy

GPU = "nvidia.com/gpu"  # parameter names: cpu, memory, gpu (or nvidia_com_gpu)
Scorer = Callable[[np.ndarray, np.ndarray], np.ndarray]


def least_requested(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """(capacity - requested) * 100 // capacity, 0 when over capacity or no capacity."""
    safe = np.maximum(capacity, 1)
    return np.where((capacity == 0) | (requested > capacity), 0, (capacity - requested) * 100 // safe)


def most_requested(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """min(requested, capacity) * 100 // capacity, 0 with no capacity."""
    safe = np.maximum(capacity, 1)
    return np.where(capacity == 0, 0, np.minimum(requested, capacity) * 100 // safe)


class NodeResourcesFitPolicy(Policy):
    """Weighted NodeResourcesFit score over cpu, memory and nvidia.com/gpu; subclasses pick the scorer."""

    scorer: Scorer
    default_weights: ClassVar[Mapping[str, int]] = MappingProxyType({"cpu": 1, "memory": 1, GPU: 1})

    def __init__(self, **params: Any) -> None:
        weights = dict(self.default_weights)
        for key, value in params.items():
            resource = GPU if key in ("gpu", "nvidia_com_gpu") else key
            if resource not in weights or not isinstance(value, int) or value < 0:
                raise TypeError(f"policy {self.name}: unknown parameter or bad weight {key}={value!r}")
            weights[resource] = value
        self.weights = weights

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        st, nodes = self.ctx.state, batch.nodes
        c = self.ctx.cluster
        dims = [
            (self.weights["cpu"], st.alloc_cpu[nodes] + batch.req_cpu, c.cpu_milli[nodes]),
            (self.weights["memory"], st.alloc_mem[nodes] + batch.req_mem, c.memory_mib[nodes]),
        ]
        if batch.req_gpu > 0:  # an extended resource the pod does not request is not scored
            gpu_cap = c.num_gpu[nodes] * MILLI
            dims.append(
                (self.weights["nvidia.com/gpu"], gpu_cap - batch.free_gpu_total + batch.req_gpu, gpu_cap)
            )
        total = np.zeros(len(nodes), dtype=np.int64)
        weight_sum = np.zeros(len(nodes), dtype=np.int64)
        for weight, requested, capacity in dims:
            present = capacity > 0
            total += np.where(present, type(self).scorer(requested, capacity) * weight, 0)
            weight_sum += np.where(present, weight, 0)
        return np.where(weight_sum > 0, total // np.maximum(weight_sum, 1), 0), None
