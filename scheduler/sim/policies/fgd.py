"""FGD (fragmentation gradient descent): place the pod where it grows the node's fragmentation least.

For node n and the pod placed there (a sharing pod: on GPU g; whole GPUs: the lowest fully free ones),
Δ = F_n(M) after - F_n(M) before, in milli-GPU (see :mod:`scheduler.sim.frag`), and

    score = floor(100 * sigmoid(-Δ / 1000))

A sharing pod goes to the GPU with the best score (the lowest index among equal scores).

Vectorised form, per target shape m with the node's usable sum U_m and count C_m of GPUs with >= d_m free:
taking d milli from GPU g changes them by ``- r_g [r_g >= d_m] + (r_g - d) [r_g - d >= d_m]`` (and the counts
alike); taking k whole GPUs by ``-1000 k`` and ``-k``. The changes are exact integers; only the final sum is
weighted by p, so a placement that changes nothing scores exactly 50.
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.model import MILLI
from scheduler.sim.policies.base import Batch, Policy, register


def _score(delta: np.ndarray) -> np.ndarray:
    return np.floor(100.0 / (1.0 + np.exp(delta / MILLI))).astype(np.int64)


@register
class FgdPolicy(Policy):
    name = "FGD"

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        fr = self.ctx.frag
        nodes = batch.nodes
        k, d = batch.req_num_gpu, batch.req_gpu_milli
        old = fr.usable[nodes]  # [n, M]
        u, c = fr.usable_m[nodes], fr.count_m[nodes]
        fits_cpu = fr.ok[nodes] & ((batch.cpu - batch.req_cpu)[:, None] >= fr.cpu)
        if batch.is_share:
            r = batch.gpu[:, :, None]  # [n, G, 1]
            rn = r - d
            before = r >= fr.milli  # [n, G, M]
            after = rn >= fr.milli
            u_new = u[:, None, :] - r * before + rn * after
            c_new = c[:, None, :] - before + after
            new = u_new * ((c_new >= fr.num_gpu) & fits_cpu[:, None, :])
            score = np.where(batch.gpu_fit, _score((old[:, None, :] - new - d) @ fr.prob), -1)
            gpu = score.argmax(axis=1)
            return score[np.arange(len(nodes)), gpu], gpu
        if k:
            u, c = u - MILLI * k, c - k
        new = u * ((c >= fr.num_gpu) & fits_cpu)
        return _score((old - new - k * d) @ fr.prob), None
