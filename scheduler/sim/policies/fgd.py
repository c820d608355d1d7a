"""FGD (fragmentation gradient descent): place the pod where it grows the node's fragmentation least.

For node n and the pod placed there (a sharing pod: on GPU g; whole GPUs: the lowest fully free ones),
Δ = F_n(M) after - F_n(M) before, in milli-GPU (see :mod:`scheduler.fgd.frag`), and

    score = floor(100 * sigmoid(-Δ / 1000))

A sharing pod goes to the GPU with the best score (the lowest index among equal scores), or, under the
``distributed`` share rule (a deployed cluster), to the GPU the device plugin picks. The score itself is
:func:`scheduler.fgd.frag.fgd_scores`, which the scheduler extender uses too.
"""

from __future__ import annotations

import numpy as np

from scheduler.fgd.frag import fgd_scores
from scheduler.sim.policies.base import Batch, Policy, register

SUBSET_MIN = 16  # from this many nodes, score only the feasible ones


@register
class FgdPolicy(Policy):
    name = "FGD"
    dedupe = True
    live_frag = True

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        nodes, feasible = batch.nodes, batch.feasible
        if len(nodes) < SUBSET_MIN or feasible.all():
            return self._score(batch, nodes, slice(None))
        keep = feasible.nonzero()[0]
        score = np.full(len(nodes), -1, dtype=np.int64)
        gpu = np.zeros(len(nodes), dtype=np.int64)
        if len(keep):
            score[keep], kept_gpu = self._score(batch, nodes[keep], keep)
            if kept_gpu is not None:
                gpu[keep] = kept_gpu
        return score, (gpu if batch.is_share else None)

    def _score(
        self, batch: Batch, nodes: np.ndarray, rows: np.ndarray | slice
    ) -> tuple[np.ndarray, np.ndarray | None]:
        whole = batch.req_num_gpu > 0
        return fgd_scores(
            self.ctx.frag,
            nodes,
            batch.cpu[rows],
            batch.gpu[rows] if whole else None,
            batch.gpu_fit[rows] if whole else None,
            batch.req_cpu,
            batch.req_num_gpu,
            batch.req_gpu_milli,
            self.ctx.share_rule,
        )
