"""FGD (fragmentation gradient descent): place the pod where it grows the node's fragmentation least.

For node n and the pod placed there (a sharing pod: on GPU g; whole GPUs: the lowest fully free ones),
Δ = F_n(M) after - F_n(M) before, in milli-GPU (see :mod:`scheduler.sim.frag`), and

    score = floor(100 * sigmoid(-Δ / 1000))

A sharing pod goes to the GPU with the best score (the lowest index among equal scores).

Vectorised form, per target shape m with the node's usable sum U_m and count C_m of GPUs with >= d_m free:
taking d milli from GPU g changes them by ``- r_g [r_g >= d_m] + (r_g - d) [r_g - d >= d_m]`` (and the counts
alike); taking k whole GPUs by ``-1000 k`` and ``-k``. Weighting by the shapes' pod counts w (p = w / sum w)
keeps Δ · sum w an exact integer, so a placement that changes nothing scores exactly 50.
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.model import MILLI
from scheduler.sim.policies.base import Batch, Policy, register


def _score(delta_weighted: np.ndarray, total: int) -> np.ndarray:
    """floor(100 * sigmoid(-delta / 1000)) with delta = delta_weighted / total (exact integers until here)."""
    return (100.0 / (1.0 + np.exp(delta_weighted / (total * MILLI)))).astype(np.int64)


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
        fr = self.ctx.frag
        k, d = batch.req_num_gpu, batch.req_gpu_milli
        total = fr.count_total
        # delta * total = old . w - new . w - request * total, all integers
        old = fr.usable_weighted[nodes] - k * d * total
        u, c = fr.usable_m[nodes], fr.count_m[nodes]
        fits_cpu = fr.ok[nodes] & ((batch.cpu[rows] - batch.req_cpu)[:, None] >= fr.cpu)
        if batch.is_share:
            g = max(int(self.ctx.cluster.num_gpu[nodes].max()), 1)  # skip padding GPUs: most nodes have 2
            r = batch.gpu[rows, :g][:, :, None]  # [n, g, 1]
            rn = r - d
            before = r >= fr.milli  # [n, g, M]
            after = rn >= fr.milli
            u_new = u[:, None, :] - r * before + rn * after
            c_new = c[:, None, :] - before + after
            new = (u_new * ((c_new >= fr.num_gpu) & fits_cpu[:, None, :])) @ fr.count  # [n, g]
            score = np.where(batch.gpu_fit[rows, :g], _score(old[:, None] - new, total), -1)
            return score.max(axis=1), score.argmax(axis=1)
        if k:
            u, c = u - MILLI * k, c - k
        new = (u * ((c >= fr.num_gpu) & fits_cpu)) @ fr.count
        return _score(old - new, total), None
