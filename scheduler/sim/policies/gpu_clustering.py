"""GpuClustering: put GPU pods of the same kind together.

A pod's tag: none (CPU-only), ``share`` (part of one GPU) or ``k-gpu`` (k whole GPUs). A node's tags are the
tags of the GPU pods on it. With U = the node's free GPU milli and b = (25 * (8000 - U)) // 8000:

    score = 75 + b   if the node's tags are exactly the pod's tag
          = 50 + b   if they include the pod's tag among others
          = 25 + b   if the node has no tags
          = b        if the node has only other tags
          = 0        for CPU-only pods (every node)
"""

from __future__ import annotations

import numpy as np

from scheduler.fgd.model import MILLI
from scheduler.sim.policies.base import GPU_NORM, Batch, Context, Policy, register


def shape_tags(num_gpu: np.ndarray, gpu_milli: np.ndarray) -> np.ndarray:
    """Tag index per shape: -1 none, 0 share, k for k whole GPUs."""
    return np.where(num_gpu == 0, -1, np.where(gpu_milli < MILLI, 0, num_gpu))


# base score by (pod's tag on the node, number of distinct tags on the node capped at 2): not there and no tags
# 25, not there among others 0, the only tag 75, among others 50
BASE = np.array([25, 0, 0, 0, 75, 50])


@register
class GpuClusteringPolicy(Policy):
    name = "GpuClustering"

    def bind(self, ctx: Context) -> None:
        super().bind(ctx)
        self.tags = shape_tags(ctx.shapes.num_gpu, ctx.shapes.gpu_milli)
        self.tag_count = np.zeros((ctx.cluster.size, max(int(self.tags.max()), 0) + 1), dtype=np.int64)
        self.distinct = np.zeros(ctx.cluster.size, dtype=np.int64)  # distinct tags per node, capped at 2

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        tag = int(self.tags[batch.s])
        if tag < 0:
            return np.zeros(len(batch.nodes), dtype=np.int64), None
        nodes = batch.nodes
        base = BASE[(self.tag_count[nodes, tag] > 0) * 3 + self.distinct[nodes]]
        return base + (25 * (GPU_NORM - batch.free_gpu_total)) // GPU_NORM, None

    def node_state(self, nodes: np.ndarray) -> np.ndarray | None:
        return self.tag_count[nodes]

    def placed(self, node: int, s: int) -> None:
        tag = int(self.tags[s])
        if tag >= 0:
            if self.tag_count[node, tag] == 0:
                self.distinct[node] = min(int(self.distinct[node]) + 1, 2)
            self.tag_count[node, tag] += 1
