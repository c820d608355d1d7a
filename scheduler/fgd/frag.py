"""The fragmentation measure of the FGD paper, kept per node and updated incrementally.

For node n (free CPU c, per-GPU free milli r_g) and a target task shape m (CPU c_m, k_m GPUs of d_m milli,
allowed models T_m), the fragment F_n(m) is the free GPU milli that m cannot use::

    F_n(m) = sum_g r_g                          if m is CPU-only or n's model is not in T_m
           = sum_g r_g * [r_g < d_m]            if c >= c_m and #{g : r_g >= d_m} >= k_m
           = sum_g r_g                          otherwise

    F_n(M) = sum_m p_m F_n(m),   F = sum_n F_n(M)

Written as ``F_n(m) = T_n - A_n(m)`` with the integer "usable" part ``A_n(m) = fits * sum_g r_g [r_g >= d_m]``,
so changes are exact integers until the final dot product with p (an unchanged node has a change of exactly 0).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Literal

import numpy as np

from scheduler.fgd.model import MILLI
from scheduler.fgd.shapes import TargetWorkload, model_mask
from scheduler.fgd.state import ClusterState

MEMO_MAX = 200_000  # memoised node states (a replay of the paper's trace sees a few thousand)

ShareRule = Literal["policy", "distributed", "first-fit"]
"""Who picks the GPU of a GPU-sharing pod: the placement policy (the paper's world, where the scheduler picks
the GPU), the NVIDIA device plugin's time-slicing rule (``distributed``: the GPU with the most free replicas,
see :func:`distributed_gpu`), which is what a deployed time-sliced cluster does: kube-scheduler only chooses
the node; or kube-scheduler's DRA allocator on a pool of GPU shares (``first-fit``: the node's first GPU, in
its ResourceSlice's order, with room for the claim, see :func:`first_fit_gpu`). A scheduler extender scores
nodes, not devices, so under DRA the policy chooses the node and the allocator the GPU."""


class NodeFragmentation:
    """Per-node fragmentation F_n(M) of a :class:`ClusterState`; call :meth:`update` after a node changes.

    Kept per node and target shape m: ``usable_m`` (sum of free milli on GPUs with >= d_m free), ``count_m``
    (how many such GPUs) and ``usable`` (A_n(m), zero where m does not fit), so F_n = T_n - A_n . p; with the
    integer shape counts w (p = w / sum w), ``usable_weighted`` = A_n . w is exact.
    """

    def __init__(
        self, state: ClusterState, target: TargetWorkload, node_model: np.ndarray, models: list[str]
    ):
        self.state = state
        self.prob = target.prob
        self.count, self.count_total = target.count, int(target.count.sum())  # integer weights, exact sums
        self.cpu = target.cpu
        self.num_gpu = target.num_gpu
        gpu_shape = target.num_gpu > 0
        self.milli = np.where(gpu_shape, target.gpu_milli, 1)
        self._milli_col = self.milli[:, None]
        model_ok = model_mask(target.spec, models, target.num_gpu) & gpu_shape[:, None]  # [M, models]
        self.ok = model_ok[:, node_model].T  # [N, M]: m is a GPU shape allowed on node n's model
        self._model = node_model.tolist()
        self._cpu_levels = sorted(set(self.cpu.tolist()))
        self._memo: dict[tuple[int, int, bytes], tuple[np.ndarray, np.ndarray, np.ndarray, int, float]] = {}
        n, m = state.cluster.size, len(self.prob)
        self.usable_m = np.zeros((n, m), dtype=np.int64)
        self.count_m = np.zeros((n, m), dtype=np.int64)
        self.usable = np.zeros((n, m), dtype=np.int64)
        self.usable_weighted = np.zeros(n, dtype=np.int64)  # usable @ count
        self.node = np.zeros(n, dtype=np.float64)
        for node in range(n):
            self._refresh(node)
        self.total = float(self.node.sum())

    def _refresh(self, node: int) -> None:
        r = self.state.free_gpu[node]
        cpu = int(self.state.free_cpu[node])
        # the values depend on the node only through its model, CPU level and free GPUs: memoise them
        key = (self._model[node], bisect_right(self._cpu_levels, cpu), r.tobytes())
        hit = self._memo.get(key)
        if hit is None:
            if len(self._memo) >= MEMO_MAX:  # a long-lived view (the extender) must stay bounded
                self._memo.clear()
            ge = r >= self._milli_col  # [M, G]
            u = ge @ r
            c = ge.sum(axis=1)
            a = u * (self.ok[node] & (c >= self.num_gpu) & (cpu >= self.cpu))
            aw = int(a @ self.count)
            hit = self._memo[key] = (u, c, a, aw, int(r.sum()) - aw / self.count_total)
        (
            self.usable_m[node],
            self.count_m[node],
            self.usable[node],
            self.usable_weighted[node],
            self.node[node],
        ) = hit

    def fragments(self, nodes: np.ndarray, cpu: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """F_n(M) of ``nodes`` if they had free CPU ``cpu`` and per-GPU free milli ``gpu`` ([n, G]), at once."""
        ge = gpu[:, None, :] >= self._milli_col  # [n, M, G]
        u = (ge * gpu[:, None, :]).sum(axis=2)
        c = ge.sum(axis=2)
        a = u * (self.ok[nodes] & (c >= self.num_gpu) & (cpu[:, None] >= self.cpu))
        return gpu.sum(axis=1) - (a @ self.count) / self.count_total

    def replay_totals(self, nodes: np.ndarray, cpu: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """Cluster F after each of a sequence of node changes (node, its new free CPU and GPUs), from the
        state this object was built on; computed in one vectorised pass instead of one update per pod.
        Afterwards ``node`` and ``total`` are current, the per-shape arrays (used by FGD) are not."""
        after = self.fragments(nodes, cpu, gpu)
        before = np.empty_like(after)
        last = self.node.copy()
        for i, node in enumerate(nodes.tolist()):
            before[i] = last[node]
            last[node] = after[i]
        totals = self.total + np.cumsum(after - before)
        self.node, self.total = last, float(totals[-1])  # per-shape arrays stay those of the start
        return totals

    def update(self, node: int) -> None:
        """Recompute one node after it changed and adjust the cluster total."""
        old = self.node[node]
        self._refresh(node)
        self.total += self.node[node] - old

    def amount(self) -> float:
        """Fragmentation amount: F / total GPU milli (0..1)."""
        cap = self.state.capacity_gpu_milli
        return self.total / cap if cap else 0.0

    def ratio(self) -> float:
        """Fragmentation ratio: F / total free GPU milli (0..1)."""
        free = self.state.free_gpu_milli
        return self.total / free if free else 0.0


def fgd_score(delta_weighted: np.ndarray, total: int) -> np.ndarray:
    """floor(100 * sigmoid(-delta / 1000)) with delta = delta_weighted / total (exact integers until here)."""
    return (100.0 / (1.0 + np.exp(delta_weighted / (total * MILLI)))).astype(np.int64)


def distributed_gpu(gpu: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """Per node, the GPU the NVIDIA device plugin gives one time-sliced replica: among the GPUs with a free
    replica, the one with the fewest allocated (the most free milli when replicas are equal), lowest index first.

    Source: NVIDIA/k8s-device-plugin ``internal/rm/allocate.go`` (``distributedAlloc``, the default
    GetPreferredAllocation for replicated resources): candidates are sorted by ``total - available`` replicas
    and the first is taken.
    """
    return np.where(fit, gpu, -1).argmax(axis=1)


def first_fit_gpu(fit: np.ndarray) -> np.ndarray:
    """Per node, the GPU kube-scheduler's DRA allocator gives a claim for a share: the first device of the node
    with room for the request. Source: k8s.io/dynamic-resource-allocation v0.36.4 (kube-scheduler v1.36.4)
    structured/internal/experimental/allocator_experimental.go, ``allocateOne``, which walks the pools' slices
    and their devices in order and takes the first that matches and has the capacity left (backtracking only
    across a claim's several requests). The twin shows it: three 2-share claims on one node share gpu-0
    (tests/twin/test_dra_shares.py)."""
    return fit.argmax(axis=1)


def fgd_scores(
    fr: NodeFragmentation,
    nodes: np.ndarray,
    free_cpu: np.ndarray,
    free_gpu: np.ndarray | None,
    gpu_fit: np.ndarray | None,
    req_cpu: int,
    num_gpu: int,
    gpu_milli: int,
    share_rule: ShareRule = "policy",
) -> tuple[np.ndarray, np.ndarray | None]:
    """FGD scores (0..100) of one pod on ``nodes`` and, for a sharing pod, the GPU per node.

    The one implementation of the FGD score, used by the simulator's FGD policy and the scheduler extender.
    ``free_cpu``/``free_gpu``/``gpu_fit`` are the nodes' free milli-CPU, per-GPU free milli and which GPUs have
    room for ``gpu_milli``; ``fr`` holds the per-node, per-target-shape usable sums of the same state.
    Feasibility is the caller's (scores of infeasible nodes are meaningless).

    Per target shape m with the node's usable sum U_m and count C_m of GPUs with >= d_m free, taking d milli
    from GPU g changes them by ``- r_g [r_g >= d_m] + (r_g - d) [r_g - d >= d_m]``; taking k whole GPUs by
    ``-1000 k`` and ``-k``. Weighting by the shapes' pod counts keeps Δ · sum w an exact integer.
    """
    k, d = num_gpu, gpu_milli
    total = fr.count_total
    # delta * total = old . w - new . w - request * total, all integers
    old = fr.usable_weighted[nodes] - k * d * total
    u, c = fr.usable_m[nodes], fr.count_m[nodes]
    fits_cpu = fr.ok[nodes] & ((free_cpu - req_cpu)[:, None] >= fr.cpu)
    if k == 1 and 0 < d < MILLI:
        assert free_gpu is not None and gpu_fit is not None, "a GPU pod needs its nodes' GPUs"
        g = max(int(fr.state.cluster.num_gpu[nodes].max()), 1) if len(nodes) else 1  # skip padding GPUs
        if share_rule != "policy":
            pick = (
                distributed_gpu(free_gpu[:, :g], gpu_fit[:, :g])
                if share_rule == "distributed"
                else first_fit_gpu(gpu_fit[:, :g])
            )
            r = free_gpu[np.arange(len(nodes)), pick][:, None]  # [n, 1]
            rn = r - d
            before, after = r >= fr.milli, rn >= fr.milli
            new = (
                (u - r * before + rn * after) * (((c - before + after) >= fr.num_gpu) & fits_cpu)
            ) @ fr.count
            return fgd_score(old - new, total), pick
        r3 = free_gpu[:, :g][:, :, None]  # [n, g, 1]
        rn3 = r3 - d
        before3, after3 = r3 >= fr.milli, rn3 >= fr.milli  # [n, g, M]
        u_new = u[:, None, :] - r3 * before3 + rn3 * after3
        c_new = c[:, None, :] - before3 + after3
        new3 = (u_new * ((c_new >= fr.num_gpu) & fits_cpu[:, None, :])) @ fr.count  # [n, g]
        score = np.where(gpu_fit[:, :g], fgd_score(old[:, None] - new3, total), -1)
        return score.max(axis=1), score.argmax(axis=1)
    if k:
        u, c = u - MILLI * k, c - k
    new = (u * ((c >= fr.num_gpu) & fits_cpu)) @ fr.count
    return fgd_score(old - new, total), None
