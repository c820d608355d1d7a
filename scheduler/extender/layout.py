"""The extender view's built layout and the arithmetic on it: where a pod's GPUs go, whether it fits, its score.

A :class:`Built` is the view's nodes as a simulator :class:`~scheduler.fgd.state.ClusterState` with its
:class:`~scheduler.fgd.frag.NodeFragmentation`; the functions here take it and return plain values or arrays,
so they hold no lock and keep no state (:class:`~scheduler.extender.view.ExtenderView` does both).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from scheduler.extender.resources import PodRequest
from scheduler.fgd.frag import NodeFragmentation, distributed_gpu, fgd_score, fgd_scores
from scheduler.fgd.model import MILLI, Cluster
from scheduler.fgd.state import ClusterState


@dataclass
class Built:
    cluster: Cluster
    index: dict[str, int]
    state: ClusterState
    frag: NodeFragmentation
    replica_milli: np.ndarray  # per node: milli of one time-sliced replica (1000 on whole-GPU nodes)
    model_of: dict[str, int]
    managed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per node: of its pools
    pool_code: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per node: its pool
    pool_names: list[str] = field(default_factory=list)  # pool_code -> pool label


def _layers(gpus: list[int]) -> list[list[int]]:
    """GPU entries with repeats (replicas of one GPU) as lists of distinct GPUs, the form ClusterState takes:
    the first list holds each GPU's first entry, the second each one's second, and so on."""
    seen: Counter[int] = Counter()
    layers: list[list[int]] = [[]]
    for g in gpus:
        if seen[g] == len(layers):
            layers.append([])
        layers[seen[g]].append(g)
        seen[g] += 1
    return layers


def take(st: ClusterState, n: int, cpu: int, mem: int, gpus: list[int], milli: int) -> None:
    """Allocate a pod on node ``n``: ``cpu``, ``mem`` and ``milli`` per entry of ``gpus`` (repeats allowed)."""
    for i, layer in enumerate(_layers(gpus)):
        st.allocate(n, cpu if i == 0 else 0, mem if i == 0 else 0, layer, milli)


def give_back(st: ClusterState, n: int, cpu: int, mem: int, gpus: list[int], milli: int) -> None:
    """Release exactly what :func:`take` allocated."""
    for i, layer in enumerate(_layers(gpus)):
        st.release(n, cpu if i == 0 else 0, mem if i == 0 else 0, layer, milli)


def room(free: np.ndarray, gpus: list[int], milli: int) -> bool:
    """Every GPU in ``gpus`` still has ``milli`` free for each time it appears."""
    return all(g < len(free) and free[g] >= milli * times for g, times in Counter(gpus).items())


def replica_gpus(free: np.ndarray, replicas: int, milli: int) -> list[int] | None:
    """The GPU of each replica, one after another by the device plugin's rule (the kubelet allocates the
    containers in turn); None if the GPUs run out of replicas."""
    row = free.copy()
    picks: list[int] = []
    for _ in range(replicas):
        fit = row >= milli
        if not fit.any():
            return None
        g = int(distributed_gpu(row[None, :], fit[None, :])[0])
        row[g] -= milli
        picks.append(g)
    return picks


def feasible(built: Built, idx: np.ndarray, req: PodRequest, d: int) -> np.ndarray:
    """Which of the nodes ``idx`` (all with replicas of ``d`` milli) have room for ``req``."""
    st = built.state
    gpu = st.free_gpu[idx]
    ok = (st.free_cpu[idx] >= req.cpu_milli) & (st.free_mem[idx] >= req.memory_mib)
    if req.replicas > 1:  # replicas left on the node's GPUs (several may come from one GPU)
        ok &= (gpu // d).sum(axis=1) >= req.replicas
    elif req.replicas or req.gpus:
        ok &= (gpu >= d).sum(axis=1) >= (req.replicas or req.gpus)
    if req.models:
        allowed = np.array([m in req.models for m in built.cluster.gpu_model], dtype=bool)
        ok &= allowed[idx]
    return ok


def fgd_group(built: Built, idx: np.ndarray, req: PodRequest, d: int) -> np.ndarray:
    """FGD scores of ``req`` on the feasible nodes ``idx``, whose replicas are all ``d`` milli."""
    st = built.state
    if req.replicas > 1:
        return fgd_replicas(built, idx, req, d)
    k = 1 if req.replicas else req.gpus
    gpu = st.free_gpu[idx]
    score, _ = fgd_scores(built.frag, idx, st.free_cpu[idx], gpu, gpu >= d, req.cpu_milli, k, d if k else 0,
                          "distributed")  # fmt: skip
    return score


def fgd_replicas(built: Built, idx: np.ndarray, req: PodRequest, d: int) -> np.ndarray:
    """FGD scores of a pod of several replicas (one per container): the nodes' fragmentation after the device
    plugin placed each replica in turn, against before; the same measure as
    :func:`~scheduler.fgd.frag.fgd_scores`, which takes one replica or whole GPUs only."""
    fr, st = built.frag, built.state
    gpu = st.free_gpu[idx].copy()
    rows = np.arange(len(idx))
    for _ in range(req.replicas):
        gpu[rows, distributed_gpu(gpu, gpu >= d)] -= d
    ge = gpu[:, None, :] >= fr.milli[None, :, None]  # [n, M, G]: GPU g has room for target shape m
    usable = (ge * gpu[:, None, :]).sum(axis=2)
    fits = (
        fr.ok[idx] & (ge.sum(axis=2) >= fr.num_gpu) & ((st.free_cpu[idx] - req.cpu_milli)[:, None] >= fr.cpu)
    )
    new = (usable * fits) @ fr.count
    old = fr.usable_weighted[idx] - req.replicas * d * fr.count_total
    return fgd_score(old - new, fr.count_total)


PROFILE_WEIGHTS = (
    1,
    1,
    10,
)  # cpu, memory, GPUs (whole or time-sliced): the stacks' default placement.weights


def most_allocated(built: Built, nodes: np.ndarray, req: PodRequest) -> np.ndarray:
    """The profile's own NodeResourcesFit ``MostAllocated`` score (0..100) of ``req`` on ``nodes``, from the
    view's state: what gpu-binpack would rank without the extender.

    kubernetes v1.35.8 ``pkg/scheduler/framework/plugins/noderesources``: ``most_allocated.go``
    ``mostRequestedScore`` = (requested + pod) * 100 / allocatable (integer), and ``resource_allocation.go``
    ``score``: a resource whose allocatable is 0 on the node, or an extended resource the pod does not ask
    for, is skipped; the node's score is the integer weighted mean. The GPU resource is the node's own:
    ``nvidia.com/gpu`` in GPUs, or ``nvidia.com/gpu.shared`` in replicas (each GPU's used replicas are its
    used milli over the replica's, rounded down), both with the GPU weight, as the stacks' profile scores them.
    """
    st, cl = built.state, built.cluster
    d = built.replica_milli[nodes]
    g = cl.num_gpu[nodes]
    used_gpu = ((st.gpu_cap[nodes] - st.free_gpu[nodes]) // d[:, None]).sum(axis=1)
    gpu_cap = g * (MILLI // d)
    asked_gpu = req.replicas or req.gpus
    alloc = np.column_stack((cl.cpu_milli[nodes], cl.memory_mib[nodes], gpu_cap))
    used = np.column_stack((
        cl.cpu_milli[nodes] - st.free_cpu[nodes], cl.memory_mib[nodes] - st.free_mem[nodes], used_gpu,
    ))  # fmt: skip
    want = np.array([req.cpu_milli, req.memory_mib, asked_gpu])
    requested = np.minimum(used + want, alloc)
    weight = np.where(alloc > 0, np.array(PROFILE_WEIGHTS), 0)
    if not asked_gpu:
        weight[:, 2] = 0
    score = (requested * 100 // np.maximum(alloc, 1) * weight).sum(axis=1)
    return np.asarray(score // np.maximum(weight.sum(axis=1), 1), dtype=np.int64)
