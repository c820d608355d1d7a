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

from scheduler.fgd.model import MILLI
from scheduler.sim.policies.base import Batch, Context, Policy

GPU = "nvidia.com/gpu"  # parameter names: cpu, memory, gpu (or nvidia_com_gpu)
SHARED = (
    "shared"  # the weight of a sharing pod's GPU resource (nvidia.com/gpu.shared); default: the GPU weight
)


class NodeResourcesFitPolicy(Policy):
    """Weighted NodeResourcesFit score over cpu, memory and nvidia.com/gpu; subclasses give the per-resource
    numerator (the score is ``numerator * 100 // allocatable``)."""

    default_weights: ClassVar[Mapping[str, int]] = MappingProxyType({"cpu": 1, "memory": 1, GPU: 1})

    def __init__(self, **params: Any) -> None:
        weights = dict(self.default_weights)
        shared: int | None = None
        for key, value in params.items():
            resource = GPU if key in ("gpu", "nvidia_com_gpu") else key
            if (resource not in weights and resource != SHARED) or not isinstance(value, int) or value < 0:
                raise TypeError(f"policy {self.name}: unknown parameter or bad weight {key}={value!r}")
            if resource == SHARED:
                shared = value
            else:
                weights[resource] = value
        # EKS weights only cpu, memory and nvidia.com/gpu: a time-sliced replica (nvidia.com/gpu.shared) is then
        # not scored at all (shared=0); the secondary scheduler's profile gives it the GPU weight
        weights[SHARED] = weights[GPU] if shared is None else shared
        self.weights = weights

    def bind(self, ctx: Context) -> None:
        super().bind(ctx)
        c = ctx.cluster
        cap = np.column_stack((c.cpu_milli, c.memory_mib, c.num_gpu * MILLI))  # [N, 3]
        self.cap, self.safe = cap, np.maximum(cap, 1)
        weight = np.array([self.weights["cpu"], self.weights["memory"], self.weights[GPU]])
        shared = np.array([self.weights["cpu"], self.weights["memory"], self.weights[SHARED]])
        # pod requests whole GPUs: scored; a share: scored with the shared weight; none: not scored
        self.weight = {True: weight, False: weight * np.array([1, 1, 0]), SHARED: shared}
        # per node, resources without allocatable are skipped too (only needed if some node lacks one)
        self.uniform = bool((cap > 0).all())
        self.node_weight = {gpu: np.where(cap > 0, w, 0) for gpu, w in self.weight.items()}
        self.node_weight_sum = {gpu: np.maximum(w.sum(axis=1), 1) for gpu, w in self.node_weight.items()}
        self.requests = [np.array([cpu, mem, k * d]) for cpu, mem, k, d in ctx.shapes.requests]
        # the same as Python lists, for score_few
        self._cap_rows: list[list[int]] = cap.tolist()
        self._request_rows = [[cpu, mem, k * d] for cpu, mem, k, d in ctx.shapes.requests]
        self._weight_rows: dict[Any, list[int]] = {gpu: w.tolist() for gpu, w in self.weight.items()}

    def numerator(self, free: np.ndarray, cap: np.ndarray, request: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def score_few(self, s: int, nodes: list[int]) -> list[int] | None:
        _, _, k, d = self.ctx.shapes.requests[s]
        weight = self._weight_rows[SHARED if k == 1 and 0 < d < MILLI else k * d > 0]
        request, free_res = self._request_rows[s], self.ctx.state.free_res
        # the subclass's numerator, written for arrays, computes alike on Python ints
        numerator: Callable[[int, int, int], int] = self.numerator  # type: ignore[assignment]
        out = []
        for node in nodes:
            total = part = 0
            for f, c, r, w in zip(
                free_res[node].tolist(), self._cap_rows[node], request, weight, strict=True
            ):
                if c > 0:  # a resource the node has none of is skipped (its weight too)
                    part += numerator(f, c, r) * 100 // c * w
                    total += w
            out.append(part // max(total, 1))
        return out

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        nodes = batch.nodes
        share = self.numerator(batch.free, self.cap[nodes], self.requests[batch.s]) * 100 // self.safe[nodes]
        gpu: bool | str = SHARED if batch.is_share else batch.req_gpu > 0
        if self.uniform:
            weight = self.weight[gpu]
            return share @ weight // max(int(weight.sum()), 1), None
        return (share * self.node_weight[gpu][nodes]).sum(axis=1) // self.node_weight_sum[gpu][nodes], None
