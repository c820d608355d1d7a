"""The policy interface and registry.

A policy scores one pod shape on a batch of nodes at once (vectorised over nodes): integer scores, -1 where
the shape does not fit, and for GPU-sharing shapes the GPU it would use. The replay loop keeps these in a
(node, shape) matrix and asks again only for nodes that changed, so a policy never loops over nodes in Python.
The highest score wins; ties go to the lowest node index, which is the smallest node name.

New policies subclass :class:`Policy`, set ``name`` and decorate the class with :func:`register`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from scheduler.sim.errors import UnknownPolicyError
from scheduler.sim.frag import NodeFragmentation
from scheduler.sim.model import MILLI, Cluster
from scheduler.sim.shapes import Shapes
from scheduler.sim.state import ClusterState

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


class Batch:
    """One shape ``s`` against the nodes ``nodes``: their free resources and what fits.

    A plain class with lazily computed per-GPU views: it is built once per placed pod, so it stays cheap.
    """

    def __init__(self, ctx: Context, s: int, nodes: np.ndarray) -> None:
        st = ctx.state
        self.s, self.nodes, self._state = s, nodes, st
        c, m, k, d = ctx.shapes.requests[s]
        self.req_cpu, self.req_mem, self.req_num_gpu, self.req_gpu_milli = c, m, k, d
        self.cpu = cpu = st.free_cpu[nodes]  # free milli-CPU per node
        self.mem = mem = st.free_mem[nodes]  # free MiB per node
        self.free_gpu_total = st.free_gpu_sum[nodes]  # total free milli-GPU per node
        feasible = (cpu >= c) & (mem >= m) & ctx.shapes.node_ok[s, nodes]
        if k:
            feasible &= self.gpu_fit.sum(axis=1) >= k
        self.feasible = feasible  # the shape fits on the node (protocol step 4)

    @cached_property
    def gpu(self) -> np.ndarray:
        """Free milli per GPU, [nodes, G]."""
        return self._state.free_gpu[self.nodes]

    @cached_property
    def gpu_fit(self) -> np.ndarray:
        """The GPU has room for the shape's per-GPU request, [nodes, G]."""
        return self.gpu >= self.req_gpu_milli

    @property
    def is_share(self) -> bool:
        return self.req_num_gpu == 1 and 0 < self.req_gpu_milli < MILLI

    @property
    def req_gpu(self) -> int:
        """Total milli-GPU the shape requests."""
        return self.req_num_gpu * self.req_gpu_milli


def make_batch(ctx: Context, s: int, nodes: np.ndarray) -> Batch:
    """Gather node state for shape ``s`` and compute feasibility."""
    return Batch(ctx, s, nodes)


def least_free_fitting_gpu(batch: Batch) -> np.ndarray:
    """Per node, the GPU with the least free milli that still fits (lowest index among equals)."""
    return np.where(batch.gpu_fit, batch.gpu, NO_FIT).argmin(axis=1)


class Policy:
    """Base policy: subclasses implement :meth:`score`; the other hooks have the protocol's defaults."""

    name: ClassVar[str] = ""

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
            return [share_gpu]
        return self.ctx.state.fully_free_gpus(node, k)

    def placed(self, node: int, s: int) -> None:
        """Called after a pod of shape ``s`` was placed on ``node`` (for policies with their own state)."""


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
