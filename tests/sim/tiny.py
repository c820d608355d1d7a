"""Tiny hand-made clusters and workloads for the simulator tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.model import Cluster, Workload
from scheduler.fgd.shapes import build_shapes, target_workload
from scheduler.fgd.state import ClusterState
from scheduler.sim.policies import Context, make_policy
from scheduler.sim.policies.base import Batch, least_free_fitting_gpu

Pod = tuple[int, int, int, int] | tuple[int, int, int, int, str]  # cpu, mem, num_gpu, gpu_milli[, spec]


def cluster(*nodes: tuple[str, int, int, int, str]) -> Cluster:
    """Nodes as (name, cpu_milli, memory_mib, num_gpu, model)."""
    names, cpu, mem, gpus, models = zip(*nodes, strict=True)
    return Cluster.build(names, cpu, mem, gpus, models)


def workload(*pods: Pod) -> Workload:
    specs = [p[4] if len(p) > 4 else "" for p in pods]  # type: ignore[misc]
    return Workload.build(
        [p[0] for p in pods], [p[1] for p in pods], [p[2] for p in pods], [p[3] for p in pods], specs
    )


def node_scores(
    c: Cluster,
    target: Workload,
    policy: str,
    pod: Pod,
    allocations: Sequence[tuple[int, int, int, list[int], int]] = (),
    **params: int,
) -> tuple[list[int], list[int]]:
    """Scores of ``pod`` on every node (-1 = infeasible) after ``allocations`` (node, cpu, mem, gpus, milli),
    with the FGD target taken from ``target``; also the sharing GPU each node would use."""
    pods = workload(pod, *target.requests())
    shapes = build_shapes(pods, c)
    state = ClusterState(c)
    for node, cpu, mem, gpus, milli in allocations:
        state.allocate(node, cpu, mem, gpus, milli)
    frag = NodeFragmentation(state, target_workload(target), shapes.node_model, sorted(set(c.gpu_model)))
    pol = make_policy(policy, **params)
    pol.bind(Context(c, state, shapes, frag, np.random.default_rng(0)))
    batch = Batch(pol.ctx, 0, np.arange(c.size))
    score, gpu = pol.score(batch)
    if gpu is None:
        gpu = least_free_fitting_gpu(batch)
    return np.where(batch.feasible, score, -1).tolist(), gpu.tolist()


def first_fit_scores(
    c: Cluster,
    policy: str,
    pod: Pod,
    allocations: Sequence[tuple[int, int, int, list[int], int]],
    target: Workload,
    **params: int,
) -> list[int]:
    """Scores of ``pod`` on every node (-1 = infeasible) by the simulator's ``policy`` on a pool of DRA shares
    (``share_rule="first-fit"``: the allocator, not the policy, picks the GPU) after ``allocations`` (node,
    cpu, mem, gpus, milli), with FGD's target the pods of ``target``."""
    pods = workload(pod, *target.requests())
    shapes = build_shapes(pods, c)
    state = ClusterState(c)
    for node, cpu, mem, gpus, milli in allocations:
        state.allocate(node, cpu, mem, gpus, milli)
    frag = NodeFragmentation(state, target_workload(target), shapes.node_model, sorted(set(c.gpu_model)))
    pol = make_policy(policy, **params)
    pol.bind(Context(c, state, shapes, frag, np.random.default_rng(0), share_rule="first-fit"))
    batch = Batch(pol.ctx, 0, np.arange(c.size))
    score, _ = pol.score(batch)
    return np.where(batch.feasible, score, -1).tolist()
