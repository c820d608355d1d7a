"""The simulator's cluster from a stack: every pool at its maximum size, node sizes from the catalog.

The simulator lives in scheduler/sim and knows nothing of specs; this is the one place a spec's pools become
simulated nodes, so `invoke simulate --stack NAME` replays a trace on exactly the cluster the stack describes.
"""

from __future__ import annotations

from infra import catalog
from infra.errors import ConfigError
from infra.spec import ClusterSpec
from scheduler.sim import Cluster


def cluster_from_spec(spec: ClusterSpec) -> Cluster:
    """One simulated node per node a pool can grow to (maxSize; hosts on existing clusters)."""
    names: list[str] = []
    cpu: list[int] = []
    memory: list[int] = []
    gpus: list[int] = []
    models: list[str] = []
    problems: list[str] = []
    for i, pool in enumerate(spec.node_pools):
        if pool.instance_type:
            itype = catalog.CATALOG[pool.instance_type]
            vcpus, mem_gib = itype.vcpus, itype.memory_gib
            hosts = [f"{pool.name}-{n:03d}" for n in range(pool.max_size or 0)]
        else:
            vcpus, mem_gib = pool.cpus_per_node or 0, pool.memory_gi_b_per_node or 0
            hosts = list(pool.hosts or [])
            for key, value in (
                ("cpusPerNode", pool.cpus_per_node),
                ("memoryGiBPerNode", pool.memory_gi_b_per_node),
            ):
                if value is None:
                    problems.append(f"gpufleet:nodePools[{i}].{key}: required to simulate a host group")
        for host in hosts:
            names.append(host)
            cpu.append(vcpus * 1000)
            memory.append(mem_gib * 1024)
            gpus.append(pool.gpus_per_node or 0)
            models.append(pool.gpu_model or "")
    if problems:
        raise ConfigError(problems)
    return Cluster.build(names, cpu, memory, gpus, models)
