"""The policy interface, the scoring call both simulators make (:func:`score_nodes`), and the registry.

A policy scores one pod shape on a batch of nodes at once (vectorised over nodes): integer scores, -1 where
the shape does not fit, and for GPU-sharing shapes the GPU it would use. The replay loop keeps these in a
(node, shape) matrix and asks again only for nodes that changed, so a policy never loops over nodes in Python.
The highest score wins; ties go to the lowest node index, which is the smallest node name.

New policies subclass :class:`Policy`, set ``name`` and decorate the class with :func:`register`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from scheduler.fgd.frag import NodeFragmentation, ShareRule
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.fgd.shapes import Shapes
from scheduler.fgd.state import ClusterState
from scheduler.sim.errors import UnknownPolicyError

CPU_NORM = 128_000  # milli-CPU of the largest node: the artifact's CPU normaliser
GPU_NORM = 8_000  # milli-GPU of the largest node: the artifact's GPU normaliser
NO_FIT = 10**9


@dataclass(frozen=True, eq=False)
class Context:
    """What a policy may read: the cluster, its live state, pod shapes, fragmentation and the run's rng."""

    cluster: Cluster
    state: ClusterState
    shapes: Shapes
    frag: NodeFragmentation
    rng: np.random.Generator
    share_rule: ShareRule = "policy"  # who picks a sharing pod's GPU (see scheduler.fgd.frag.ShareRule)
    target: Workload | None = None  # the pod list whose shapes are FGD's expected workload


class Batch:
    """One shape ``s`` against the nodes ``nodes``: their free resources and what fits.

    A plain class (built once per placed pod, so it stays cheap). ``gpu`` (free milli per GPU, [n, G]) and
    ``gpu_fit`` (the GPU has room for the per-GPU request) are computed up front for GPU shapes and on first
    use for CPU-only ones.
    """

    gpu: np.ndarray
    gpu_fit: np.ndarray

    def __init__(self, ctx: Context, s: int, nodes: np.ndarray) -> None:
        st, sh = ctx.state, ctx.shapes
        self.s, self.nodes, self._state = s, nodes, st
        c, m, k, d = sh.requests[s]
        self.req_cpu, self.req_mem, self.req_num_gpu, self.req_gpu_milli = c, m, k, d
        self.free = free = st.free_res[nodes]  # [n, 3]: free milli-CPU, MiB, total milli-GPU per node
        feasible = (free[:, :2] >= sh.cpu_mem[s]).all(axis=1)
        if sh.restricted[s]:
            feasible &= sh.node_ok[s][nodes]
        if k:
            self.gpu = st.free_gpu[nodes]
            self.gpu_fit = self.gpu >= d
            feasible &= self.gpu_fit.sum(axis=1) >= k
        self.feasible = feasible  # the shape fits on the node (protocol step 4)

    def __getattr__(self, name: str) -> np.ndarray:
        # per-GPU views of CPU-only batches, computed only if a policy asks for them
        if name == "gpu":
            self.gpu = self._state.free_gpu[self.nodes]
            return self.gpu
        if name == "gpu_fit":
            self.gpu_fit = self.gpu >= self.req_gpu_milli
            return self.gpu_fit
        raise AttributeError(name)

    @property
    def cpu(self) -> np.ndarray:
        """Free milli-CPU per node."""
        return self.free[:, 0]

    @property
    def mem(self) -> np.ndarray:
        """Free MiB per node."""
        return self.free[:, 1]

    @property
    def free_gpu_total(self) -> np.ndarray:
        """Total free milli-GPU per node."""
        return self.free[:, 2]

    @property
    def is_share(self) -> bool:
        return self.req_num_gpu == 1 and 0 < self.req_gpu_milli < MILLI

    @property
    def req_gpu(self) -> int:
        """Total milli-GPU the shape requests."""
        return self.req_num_gpu * self.req_gpu_milli


def feasible(state: ClusterState, shapes: Shapes, s: int, nodes: np.ndarray) -> np.ndarray:
    """Which of ``nodes`` shape ``s`` fits on (:class:`Batch`'s ``feasible``, without gathering a batch): a
    caller that only needs to know can skip scoring the nodes where it does not."""
    _, _, k, d = shapes.requests[s]
    ok = (state.free_res[nodes, :2] >= shapes.cpu_mem[s]).all(axis=1)
    if shapes.restricted[s]:
        ok &= shapes.node_ok[s][nodes]
    if k:
        ok &= (state.free_gpu[nodes] >= d).sum(axis=1) >= k
    return np.asarray(ok)


def make_batch(ctx: Context, s: int, nodes: np.ndarray) -> Batch:
    """Gather node state for shape ``s`` and compute feasibility."""
    return Batch(ctx, s, nodes)


def least_free_fitting_gpu(batch: Batch) -> np.ndarray:
    """Per node, the GPU with the least free milli that still fits (lowest index among equals)."""
    return np.where(batch.gpu_fit, batch.gpu, NO_FIT).argmin(axis=1)


def least_free_fitting_gpu_of(free: list[int], milli: int) -> int:
    """:func:`least_free_fitting_gpu` of one node's free milli per GPU, in Python."""
    best, at = NO_FIT, 0
    for i, x in enumerate(free):
        if milli <= x < best:
            best, at = x, i
    return at


class Policy:
    """Base policy: subclasses implement :meth:`score`; the other hooks have the protocol's defaults."""

    name: ClassVar[str] = ""
    uses_share_gpu: ClassVar[bool] = True  # choose_gpus takes the scored GPU of sharing shapes
    live_frag: ClassVar[bool] = False  # reads ctx.frag while scoring: keep it updated after every pod
    dedupe: ClassVar[bool] = (
        False  # score one node per group of identical nodes in large batches (costly scores)
    )

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"policy {self.name} takes no parameters, got {sorted(params)}")

    def bind(self, ctx: Context) -> None:
        """Called once per run before any scoring."""
        self.ctx = ctx

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        """Integer scores (any value where infeasible; the loop masks them) and, for sharing shapes, the GPU
        index per node (``None``: the least-free fitting GPU)."""
        raise NotImplementedError

    def score_few(self, s: int, nodes: list[int]) -> list[int] | None:
        """Shape ``s``'s scores on ``nodes``, where it fits (a few nodes changed since they were last scored),
        computed in Python by the same arithmetic as :meth:`score`, or None where the policy has no such path:
        numpy's cost per call dominates for a few nodes. Only a policy whose :meth:`score` leaves a sharing pod's
        GPU to :func:`least_free_fitting_gpu` has one."""
        return None

    def node_state(self, nodes: np.ndarray) -> np.ndarray | None:
        """Per-node bookkeeping the scores depend on besides the node's resources (int columns), or None.

        The loop scores only one node of each group of identical nodes in a large batch.
        """
        return None

    def choose_node(self, column: np.ndarray, s: int) -> int:
        """Index of the chosen node given one shape's scores (-1 = infeasible); -1 if none fits."""
        n = int(column.argmax())
        return n if column[n] >= 0 else -1

    def choose_gpus(self, node: int, s: int, share_gpu: int) -> list[int]:
        """GPUs to take on ``node``: the scored GPU for sharing shapes, the lowest fully free ones otherwise."""
        sh = self.ctx.shapes
        k, d = int(sh.num_gpu[s]), int(sh.gpu_milli[s])
        if k == 0:
            return []
        if k == 1 and d < MILLI:
            if self.ctx.share_rule == "distributed":  # the device plugin picks the GPU, not the scheduler
                row = self.ctx.state.free_gpu[node]
                return [int(np.where(row >= d, row, -1).argmax())]
            if self.ctx.share_rule == "first-fit":  # DRA: the allocator's first device with room
                return [int((self.ctx.state.free_gpu[node] >= d).argmax())]
            return [share_gpu]
        return self.ctx.state.fully_free_gpus(node, k)

    def placed(self, node: int, s: int) -> None:
        """Called after a pod of shape ``s`` was placed on ``node`` (for policies with their own state)."""


DEDUPE_MIN = 48  # batches at least this large score one node per group of identical nodes
_HASH = np.random.default_rng(0).integers(1, 2**62, size=64, dtype=np.int64) | 1


def score_nodes(
    pol: Policy, s: int, nodes: np.ndarray, static: np.ndarray, share: bool
) -> tuple[np.ndarray, Any]:
    """Scores (-1 where infeasible) and sharing GPU choices of shape ``s`` on ``nodes``: the one scoring call the
    placement replay and the dynamic simulation share.

    ``static`` holds each node's fixed columns (milli-CPU, MiB, GPUs, GPU model). A policy that sets ``dedupe``
    is asked once per group of identical nodes in a batch of at least DEDUPE_MIN (same fixed columns, free
    resources and ``node_state``), the group's score copied to its other nodes."""
    inverse = None
    if pol.dedupe and len(nodes) >= DEDUPE_MIN:
        st = pol.ctx.state
        columns = [static[nodes], st.free_cpu[nodes, None], st.free_mem[nodes, None], st.free_gpu[nodes]]
        extra = pol.node_state(nodes)
        if extra is not None:
            columns.append(extra)
        rows = np.hstack(columns)
        key = rows @ _HASH[: rows.shape[1]]  # wraps on overflow; equal rows give equal keys
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        if np.array_equal(rows, rows[first][inverse]):  # no hash collision: group exactly
            nodes = nodes[first]
        else:
            inverse = None
    batch = make_batch(pol.ctx, s, nodes)
    score, gpu = pol.score(batch)
    score = np.where(batch.feasible, score, -1)
    if share and gpu is None and pol.uses_share_gpu:
        gpu = least_free_fitting_gpu(batch)
    if inverse is not None:
        inverse = inverse.reshape(-1)
        return score[inverse], (gpu[inverse] if gpu is not None else None)
    return score, gpu


REGISTRY: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy available by its ``name``."""
    if not cls.name or cls.name in REGISTRY:
        raise ValueError(f"policy name {cls.name!r} missing or already registered")
    REGISTRY[cls.name] = cls
    return cls


def make_policy(name: str, **params: Any) -> Policy:
    """A fresh policy instance by name (case-insensitive)."""
    by_lower = {n.lower(): cls for n, cls in REGISTRY.items()}
    cls = by_lower.get(name.lower())
    if cls is None:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose from {', '.join(sorted(REGISTRY))}")
    return cls(**params)
