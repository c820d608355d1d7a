"""The simulator's inputs: a cluster of GPU nodes and a workload of pods, as plain numpy arrays.

Nodes are kept sorted by name, so a node's index order is its name order: the policies' tie-break (the
lexicographically smallest name wins) is then simply "the first maximum" (``np.argmax``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

MILLI = 1000  # milli-GPU in one whole GPU


def _int_array(values: Sequence[int] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=np.int64)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class Cluster:
    """GPU nodes: CPU (milli-CPU), memory (MiB), GPU count and GPU model per node, sorted by name."""

    names: tuple[str, ...]
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_model: tuple[str, ...]

    @classmethod
    def build(
        cls,
        names: Sequence[str],
        cpu_milli: Sequence[int],
        memory_mib: Sequence[int],
        num_gpu: Sequence[int],
        gpu_model: Sequence[str],
    ) -> Cluster:
        """Build a cluster from parallel lists in any order; nodes are sorted by name."""
        order = sorted(range(len(names)), key=lambda i: names[i])
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        return cls(
            names=tuple(names[i] for i in order),
            cpu_milli=_int_array([cpu_milli[i] for i in order]),
            memory_mib=_int_array([memory_mib[i] for i in order]),
            num_gpu=_int_array([num_gpu[i] for i in order]),
            gpu_model=tuple(gpu_model[i] for i in order),
        )

    def __post_init__(self) -> None:
        n = len(self.names)
        if not (len(self.cpu_milli) == len(self.memory_mib) == len(self.num_gpu) == len(self.gpu_model) == n):
            raise ValueError("cluster arrays must all have one entry per node")
        if list(self.names) != sorted(self.names):
            raise ValueError("cluster nodes must be sorted by name (use Cluster.build)")

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def max_gpus(self) -> int:
        return int(self.num_gpu.max()) if self.size else 0

    @property
    def gpu_capacity_milli(self) -> int:
        """Total GPU capacity in milli-GPU."""
        return int(self.num_gpu.sum()) * MILLI


@dataclass(frozen=True, eq=False)
class Workload:
    """Pods in trace order. ``gpu_milli`` is per GPU; ``gpu_spec`` is "" (any model) or ``A|B``.

    ``source`` and ``rows`` (1-based data row of each pod in its file) let later checks name the file and row.
    """

    names: tuple[str, ...]
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_spec: tuple[str, ...]
    source: str | None = None
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def build(
        cls,
        cpu_milli: Sequence[int],
        memory_mib: Sequence[int],
        num_gpu: Sequence[int],
        gpu_milli: Sequence[int],
        gpu_spec: Sequence[str] | None = None,
        names: Sequence[str] | None = None,
        source: str | None = None,
    ) -> Workload:
        """Build a workload from parallel lists; names default to ``pod-000000``... in the given order."""
        n = len(cpu_milli)
        return cls(
            names=tuple(names) if names is not None else tuple(f"pod-{i:06d}" for i in range(n)),
            cpu_milli=_int_array(cpu_milli),
            memory_mib=_int_array(memory_mib),
            num_gpu=_int_array(num_gpu),
            gpu_milli=_int_array(gpu_milli),
            gpu_spec=tuple(gpu_spec) if gpu_spec is not None else ("",) * n,
            source=source,
            rows=_int_array(range(1, n + 1)),
        )

    def __post_init__(self) -> None:
        n = len(self.names)
        arrays = (self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_spec)
        if any(len(a) != n for a in arrays):
            raise ValueError("workload arrays must all have one entry per pod")
        if len(self.rows) != n:
            object.__setattr__(self, "rows", _int_array(range(1, n + 1)))

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def gpu_request_milli(self) -> np.ndarray:
        """Total milli-GPU each pod requests (num_gpu x gpu_milli)."""
        return self.num_gpu * self.gpu_milli

    def requests(self) -> list[tuple[int, int, int, int, str]]:
        """Each pod's request as plain values: (cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec)."""
        return list(
            zip(
                self.cpu_milli.tolist(),
                self.memory_mib.tolist(),
                self.num_gpu.tolist(),
                self.gpu_milli.tolist(),
                self.gpu_spec,
                strict=True,
            )
        )

    def take(self, index: np.ndarray) -> Workload:
        """The pods at ``index`` (repeats allowed), in that order."""
        idx = np.asarray(index, dtype=np.int64)
        return Workload(
            names=tuple(self.names[i] for i in idx),
            cpu_milli=_int_array(self.cpu_milli[idx]),
            memory_mib=_int_array(self.memory_mib[idx]),
            num_gpu=_int_array(self.num_gpu[idx]),
            gpu_milli=_int_array(self.gpu_milli[idx]),
            gpu_spec=tuple(self.gpu_spec[i] for i in idx),
            source=self.source,
            rows=_int_array(self.rows[idx]),
        )
