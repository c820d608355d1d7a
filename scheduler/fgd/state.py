"""Cluster state with per-GPU accounting: free CPU and memory per node, free milli-GPU (0..1000) per GPU.

Nodes with fewer GPUs than the largest node are padded with zero-capacity GPUs, which never fit a GPU
request and add nothing to any total. :meth:`ClusterState.allocate` refuses anything that would exceed
capacity, and :meth:`ClusterState.check` verifies ``allocated + free == capacity`` on every node and every
dimension (tests call it after every event).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.fgd.model import MILLI, Cluster


class AllocationError(RuntimeError):
    """An allocation that does not fit: a bug in a policy or the replay loop, never bad input."""


class ClusterState:
    """Mutable free/allocated resources of a :class:`Cluster`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        n, g = cluster.size, max(cluster.max_gpus, 1)
        self.gpu_cap = np.where(np.arange(g)[None, :] < cluster.num_gpu[:, None], MILLI, 0).astype(np.int64)
        self.free_gpu = self.gpu_cap.copy()
        # free CPU, memory and total GPU milli per node side by side, so one gather reads all three
        self.free_res = np.column_stack((cluster.cpu_milli, cluster.memory_mib, self.gpu_cap.sum(axis=1)))
        self.free_cpu = self.free_res[:, 0]
        self.free_mem = self.free_res[:, 1]
        self.free_gpu_sum = self.free_res[:, 2]
        self.alloc_cpu = np.zeros(n, dtype=np.int64)
        self.alloc_mem = np.zeros(n, dtype=np.int64)
        self.alloc_gpu = np.zeros((n, g), dtype=np.int64)
        self.pods = np.zeros(n, dtype=np.int64)
        self.allocated_gpu_milli = 0
        self.capacity_gpu_milli = int(self.gpu_cap.sum())

    @property
    def free_gpu_milli(self) -> int:
        return self.capacity_gpu_milli - self.allocated_gpu_milli

    def fully_free_gpus(self, node: int, count: int) -> list[int]:
        """The ``count`` lowest-indexed fully free GPUs of ``node`` (fewer if the node has fewer)."""
        return [g for g, free in enumerate(self.free_gpu[node].tolist()) if free == MILLI][:count]

    def allocate(self, node: int, cpu: int, mem: int, gpus: Sequence[int], gpu_milli: int) -> None:
        """Take ``cpu``, ``mem`` and ``gpu_milli`` on each GPU in ``gpus`` from ``node``.

        Raises :class:`AllocationError` (and changes nothing) if any of it does not fit.
        """
        row = self.free_gpu[node]
        if not (0 <= cpu <= self.free_cpu[node] and 0 <= mem <= self.free_mem[node] and gpu_milli >= 0):
            raise AllocationError(f"node {self.cluster.names[node]}: CPU or memory over capacity")
        if (len(gpus) > 1 and len(set(gpus)) != len(gpus)) or any(
            not 0 <= g < len(row) or row[g] < gpu_milli for g in gpus
        ):
            raise AllocationError(
                f"node {self.cluster.names[node]}: GPUs {list(gpus)} cannot take {gpu_milli}"
            )
        if gpus:
            alloc = self.alloc_gpu[node]
            for g in gpus:
                row[g] -= gpu_milli
                alloc[g] += gpu_milli
            taken = gpu_milli * len(gpus)
            self.free_gpu_sum[node] -= taken
            self.allocated_gpu_milli += taken
        self.free_cpu[node] -= cpu
        self.alloc_cpu[node] += cpu
        self.free_mem[node] -= mem
        self.alloc_mem[node] += mem
        self.pods[node] += 1

    def take_gpus(self, used: np.ndarray) -> None:
        """Allocate ``used`` milli of each GPU at once ([nodes, GPUs], as ``free_gpu``), as no pod: what others
        hold of GPUs shared through DRA. Raises :class:`AllocationError` (and changes nothing) if it does not fit."""
        if used.shape != self.free_gpu.shape or (used < 0).any() or (used > self.free_gpu).any():
            raise AllocationError("GPUs cannot take the given per-GPU allocations")
        self.free_gpu -= used
        self.alloc_gpu += used
        self.free_gpu_sum -= used.sum(axis=1)
        self.allocated_gpu_milli += int(used.sum())

    def release(self, node: int, cpu: int, mem: int, gpus: Sequence[int], gpu_milli: int) -> None:
        """Give back what :meth:`allocate` took (a pod that left; the extender's view of a live cluster).

        Raises :class:`AllocationError` (and changes nothing) if it was not allocated.
        """
        alloc = self.alloc_gpu[node]
        if not (cpu <= self.alloc_cpu[node] and mem <= self.alloc_mem[node] and self.pods[node] > 0) or any(
            alloc[g] < gpu_milli for g in gpus
        ):
            raise AllocationError(f"node {self.cluster.names[node]}: releasing more than was allocated")
        for g in gpus:
            self.free_gpu[node, g] += gpu_milli
            alloc[g] -= gpu_milli
        taken = gpu_milli * len(gpus)
        self.free_gpu_sum[node] += taken
        self.allocated_gpu_milli -= taken
        self.free_cpu[node] += cpu
        self.alloc_cpu[node] -= cpu
        self.free_mem[node] += mem
        self.alloc_mem[node] -= mem
        self.pods[node] -= 1

    def conservation_errors(self) -> list[str]:
        """Every node and dimension where allocated + free != capacity or a value is out of range."""
        c = self.cluster
        errors: list[str] = []
        checks = (
            ("cpu", self.alloc_cpu + self.free_cpu == c.cpu_milli, self.free_cpu >= 0),
            ("memory", self.alloc_mem + self.free_mem == c.memory_mib, self.free_mem >= 0),
            (
                "gpu",
                (self.alloc_gpu + self.free_gpu == self.gpu_cap).all(axis=1),
                ((self.free_gpu >= 0) & (self.alloc_gpu >= 0)).all(axis=1),
            ),
        )
        for dim, conserved, in_range in checks:
            for n in np.flatnonzero(~(conserved & in_range)):
                errors.append(f"node {c.names[n]}: {dim} allocated + free != capacity or negative")
        if (self.free_gpu_sum != self.free_gpu.sum(axis=1)).any():
            errors.append("per-node free GPU totals do not match the per-GPU free milli")
        if self.allocated_gpu_milli != int(self.alloc_gpu.sum()):
            errors.append("allocated GPU total does not match the per-GPU allocations")
        return errors

    def check(self) -> None:
        """Raise ``AssertionError`` listing every conservation violation."""
        errors = self.conservation_errors()
        if errors:
            raise AssertionError("; ".join(errors))
