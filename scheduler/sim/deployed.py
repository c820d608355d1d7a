"""The ``--as-deployed`` mapping: an openb trace replayed on the cluster as gpufleet deploys it.

The paper's world (``openb``) has no pools: CPU-only pods share the GPU nodes and a pod may take any fraction
of a GPU, which the scheduler places on a GPU of its choice. A gpufleet cluster differs in three ways, and the
mapping applies each of them to every pod:

1. **Taints.** GPU nodes carry the ``nvidia.com/gpu`` NoSchedule taint; CPU-only pods run on the CPU pool (the
   system pool, unlimited here). They leave the GPU replay and are reported apart (count, CPU, memory).
2. **Whole GPUs** (``nvidia.com/gpu: k``) are unchanged: k fully free GPUs of one node.
3. **Fractions become one time-sliced replica.** A time-sliced GPU is advertised as ``replicas`` units of
   ``nvidia.com/gpu.shared`` and the device plugin gives a container at most one replica
   (``failRequestsGreaterThanOne``), so a pod asking for d milli of a GPU takes exactly ``1000 / replicas``
   milli, on the GPU the device plugin picks (the one with the fewest allocated replicas,
   :func:`scheduler.fgd.frag.distributed_gpu`), not the scheduler. Pods asking more than one replica are the
   GPU share the mapping *cannot express*: the deployed cluster gives them less than the trace says; their
   count and the milli-GPU they lose are reported, never hidden.

One simplification, stated: openb has no pools, so the replay keeps every GPU node in one pool whose GPUs
serve whole-GPU pods and replicas alike (a GPU with one replica taken is no longer whole). gpufleet's own
stacks put time-sliced and whole GPUs in separate pools; ``invoke simulate --stack`` models those as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from scheduler.fgd.model import MILLI, Workload

DEFAULT_REPLICAS = 2  # replicas per time-sliced GPU: one replica = 500 milli-GPU, near the median openb share


@dataclass(frozen=True)
class MappingReport:
    """What the mapping changed and what it cannot express."""

    replicas: int
    gpu_pods: int  # pods replayed on the GPU nodes
    cpu_only_pods: int  # pods moved to the CPU pool (reported apart)
    cpu_only_cpu_milli: int
    cpu_only_memory_mib: int
    shared_pods: int  # pods that became one replica
    under_pods: int  # sharing pods asking more than one replica: the deployed cluster gives them less
    under_milli: int  # milli-GPU those pods ask beyond their replica
    over_milli: int  # milli-GPU replicas give beyond what their pods ask

    def lines(self) -> list[str]:
        return [
            f"as deployed: {self.gpu_pods} GPU pods on the GPU nodes; {self.cpu_only_pods} CPU-only pods on the "
            f"CPU pool ({self.cpu_only_cpu_milli / 1000:.0f} cores, {self.cpu_only_memory_mib / 1024:.0f} GiB)",
            f"{self.shared_pods} sharing pods take one replica of {MILLI // self.replicas} milli-GPU "
            f"({self.replicas} per GPU); {self.under_pods} of them ask more, and "
            f"{self.under_milli / MILLI:.1f} GPUs of their requests cannot be expressed "
            f"({self.over_milli / MILLI:.1f} GPUs are given beyond what smaller pods ask)",
        ]


def as_deployed(workload: Workload, replicas: int = DEFAULT_REPLICAS) -> tuple[Workload, MappingReport]:
    """The GPU pods of ``workload`` as the deployed cluster sees them, and the report of the mapping."""
    if not 1 <= replicas <= MILLI:
        raise ValueError(f"replicas must be 1..{MILLI}, got {replicas}")
    cpu_only = workload.num_gpu == 0
    share = (workload.num_gpu == 1) & (workload.gpu_milli < MILLI) & ~cpu_only
    replica = MILLI // replicas
    keep = np.flatnonzero(~cpu_only)
    mapped = workload.take(keep)
    milli = np.where(share[keep], replica, mapped.gpu_milli)
    mapped = replace(mapped, gpu_milli=milli)
    asked = workload.gpu_milli[share]
    report = MappingReport(
        replicas=replicas,
        gpu_pods=len(keep),
        cpu_only_pods=int(cpu_only.sum()),
        cpu_only_cpu_milli=int(workload.cpu_milli[cpu_only].sum()),
        cpu_only_memory_mib=int(workload.memory_mib[cpu_only].sum()),
        shared_pods=int(share.sum()),
        under_pods=int((asked > replica).sum()),
        under_milli=int(np.clip(asked - replica, 0, None).sum()),
        over_milli=int(np.clip(replica - asked, 0, None).sum()),
    )
    return mapped, report
