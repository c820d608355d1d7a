"""How a pool's GPUs appear to Kubernetes: the extended resource name and how many units one GPU is worth.

Whole GPUs are `nvidia.com/gpu`; time-sliced GPUs are renamed to `nvidia.com/gpu.shared` (one GPU = `replicas`
units) so a shared slice can never be mistaken for a whole GPU in a quota; MIG GPUs use the mixed strategy's
`nvidia.com/mig-<profile>` (one GPU = its instance count); DRA-shared GPUs are Kueue's logical resource
`gpufleet.io/gpu-shares` (one GPU = its shares; scheduler.dra). Quotas in the spec are in GPUs everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scheduler.labels import GPU_RESOURCE, SHARE_RESOURCE, SHARED_GPU_RESOURCE, mig_resource
from scheduler.model import PoolView

# When the pool does not say what a node has, a GPU flavor's CPU/memory quota must not be what limits admission:
# these exceed the per-GPU share of every GPU instance type (p5.48xlarge: 24 vCPU and 256 GiB per GPU).
FALLBACK_CPUS_PER_GPU = 32
FALLBACK_MEMORY_GIB_PER_GPU = 256


def gpu_resource(pool: PoolView) -> str:
    if pool.sharing == "draShares":
        return SHARE_RESOURCE
    if pool.sharing == "timeSlicing":
        return SHARED_GPU_RESOURCE
    if pool.sharing == "mig":
        return mig_resource(pool.mig_profile or "")
    return GPU_RESOURCE


def units_per_gpu(pool: PoolView) -> int:
    if pool.sharing == "draShares":
        return pool.dra_shares or 1
    if pool.sharing == "timeSlicing":
        return pool.time_slicing_replicas or 1
    if pool.sharing == "mig":
        return pool.mig_instances_per_gpu or 1
    return 1


def gpu_units(pool: PoolView, gpus: int) -> int:
    """`gpus` whole GPUs of `pool` in the pool's own resource units."""
    return gpus * units_per_gpu(pool)


def cpu_for_gpus(pool: PoolView, gpus: int) -> int:
    """Cores that go with `gpus` GPUs of this pool (the GPUs' share of their nodes), rounded up."""
    per_node = pool.cpus_per_node or FALLBACK_CPUS_PER_GPU * pool.gpus_per_node
    return math.ceil(gpus * per_node / pool.gpus_per_node)


def memory_gib_for_gpus(pool: PoolView, gpus: int) -> int:
    per_node = pool.memory_gib_per_node or FALLBACK_MEMORY_GIB_PER_GPU * pool.gpus_per_node
    return math.ceil(gpus * per_node / pool.gpus_per_node)


def cpus_per_unit(pool: PoolView) -> float:
    """Cores a pod may have per GPU unit of the pool (per whole GPU, time-sliced replica or MIG instance): what a
    node offers pods (its room where known, else its cores) over its units, so that a node's every unit asked at
    that share fits the node."""
    if pool.pod_room is not None:
        per_node = pool.pod_room[0] / 1000
    else:
        per_node = pool.cpus_per_node or FALLBACK_CPUS_PER_GPU * pool.gpus_per_node
    return per_node / (pool.gpus_per_node * units_per_gpu(pool))


def memory_gib_per_unit(pool: PoolView) -> float:
    """GiB a pod may have per GPU unit of the pool, as :func:`cpus_per_unit`."""
    if pool.pod_room is not None:
        per_node = pool.pod_room[1] / 1024
    else:
        per_node = pool.memory_gib_per_node or FALLBACK_MEMORY_GIB_PER_GPU * pool.gpus_per_node
    return per_node / (pool.gpus_per_node * units_per_gpu(pool))


def covered_gpu_resources(pools: Sequence[PoolView]) -> list[str]:
    """Every GPU resource name the pools expose, whole GPUs first, in a stable order."""
    names = [GPU_RESOURCE]
    for pool in pools:
        name = gpu_resource(pool)
        if name not in names:
            names.append(name)
    return names
