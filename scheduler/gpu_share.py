"""Cores and memory a GPU pod may ask per GPU unit it requests: the pool's per-GPU share of its nodes.

Kueue admits by quota, per flavor and resource, with no view of nodes (scheduler.kueue): the cores that come with
GPUs are one pooled `gpu-cores` quota. A pod asking 190 cores with one GPU fits that quota and leaves a node's
other GPUs without cores, so another team's admitted job waits on GPUs the quotas say are free. A pod, and
every pod template of a job, that requests GPU units may therefore ask at most, per unit, the cores and memory
a node of the pool offers per unit: on a pool of 192-core, 8-GPU nodes 24 cores per GPU; on a time-sliced pool
of 64-core, 4-GPU nodes with 2 replicas 8 cores per slice (cores / GPUs / replicas). Where several pools
expose the same resource name, the largest of their shares bounds it (admission does not know the pool yet).
Pods that request no GPU are not bounded here: they run in the `cpu` queue, on the CPU nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.model import PoolView
from scheduler.podcel import amount, pod_request
from scheduler.resources import cpus_per_unit, gpu_resource, memory_gib_per_unit

GIB = 2**30
# Rounding slack: a thousandth of a core and a KiB, far below what a pod can ask for.
CPU_SLACK = 0.001
MEMORY_SLACK = 1024.0


def unit_shares(pools: Sequence[PoolView]) -> dict[str, tuple[float, float]]:
    """GPU resource name -> (cores, GiB) a node offers per unit of it, the largest over the pools exposing it."""
    out: dict[str, tuple[float, float]] = {}
    for pool in pools:
        name = gpu_resource(pool)
        cpu, memory = cpus_per_unit(pool), memory_gib_per_unit(pool)
        old_cpu, old_memory = out.get(name, (0.0, 0.0))
        out[name] = (max(cpu, old_cpu), max(memory, old_memory))
    return out


def within_share(var: str, pools: Sequence[PoolView]) -> str:
    """CEL: the pod (or template) `var` requests no GPU unit of the pools, or at most their share per unit.
    GPU units are counted in the app containers (a pod-level request cannot name an extended resource)."""
    shares = unit_shares(pools)
    if not shares:
        return "true"

    def bound(index: int, scale: float) -> str:
        per_container = " + ".join(
            f"{amount(name)} * {share[index] * scale!r}" for name, share in shares.items()
        )
        return f"{var}.spec.containers.map(c, {per_container}).sum()"

    cpu, memory = bound(0, 1.0), bound(1, float(GIB))
    return (
        f"{cpu} == 0.0 || ({pod_request(var, 'cpu')} <= {cpu} + {CPU_SLACK!r} && "
        f"{pod_request(var, 'memory')} <= {memory} + {MEMORY_SLACK!r})"
    )


def admits(share: tuple[float, float], units: int, cpu_milli: int, memory_mib: int) -> bool:
    """The comparison :func:`within_share` writes in CEL, for one resource: a pod asking ``units`` of a resource
    whose ``share`` is (cores, GiB) per unit may ask these cores and memory (within the same slack)."""
    cores, gib = share
    return (
        cpu_milli / 1000 <= units * cores + CPU_SLACK
        and memory_mib * 2**20 <= units * gib * GIB + MEMORY_SLACK
    )


def share_message(pools: Sequence[PoolView], what: str) -> str:
    """The refusal, with each resource's share."""
    shares = ", ".join(
        f"{name}: {share_number(c)} cores and {share_number(m)}Gi"
        for name, (c, m) in unit_shares(pools).items()
    )
    return (
        f"{what} asks more cores or memory per GPU than a node of its pool offers per GPU ({shares}); the "
        "rest of the node's GPUs would be left without them"
    )


def share_number(value: float) -> str:
    """A share's cores or GiB as the refusal writes it: two decimals, no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".")
