"""Pod shapes: the few hundred distinct requests a trace is made of, and the FGD target workload.

A trace of ~10,000 pods has only ~150 distinct (cpu, memory, num_gpu, gpu_milli, gpu_spec) rows. The replay
loop keeps one score per (node, shape), so a pod's placement is an argmax over one column and placing it
only recomputes the changed node's row.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from scheduler.fgd.model import MILLI, Cluster, Workload

TARGET_COVERAGE = 0.95  # the FGD target workload: most popular shapes covering 95 % of pods


@dataclass(frozen=True, eq=False)
class Shapes:
    """Distinct pod shapes (arrays indexed by shape id) and each pod's shape id.

    ``model_ok[s, j]`` says whether shape ``s`` may run on GPU model ``models[j]``; ``node_model[n]`` is
    node ``n``'s model index, so ``model_ok[:, node_model[n]]`` is one node's column.
    """

    cpu: np.ndarray
    mem: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    spec: tuple[str, ...]
    model_ok: np.ndarray
    node_model: np.ndarray
    pod_shape: np.ndarray
    node_ok: np.ndarray  # [S, N]: shape s may run on node n's GPU model
    requests: list[tuple[int, int, int, int]]  # (cpu, mem, num_gpu, gpu_milli) per shape, Python ints
    cpu_mem: list[np.ndarray]  # (cpu, mem) request per shape, to compare with free (cpu, mem) rows
    restricted: list[bool]  # the shape may not run on some node of the cluster (GPU model)

    @property
    def count(self) -> int:
        return len(self.cpu)

    @property
    def is_share(self) -> np.ndarray:
        """Shapes that take part of one GPU."""
        return (self.num_gpu == 1) & (self.gpu_milli > 0) & (self.gpu_milli < MILLI)

    @property
    def gpu_request(self) -> np.ndarray:
        return self.num_gpu * self.gpu_milli


def allowed_models(spec: str) -> frozenset[str]:
    return frozenset(s for s in spec.split("|") if s)


def model_mask(specs: tuple[str, ...], models: list[str], num_gpu: np.ndarray) -> np.ndarray:
    """``mask[s, j]``: shape ``s`` (a GPU spec per shape) may run on model ``models[j]``."""
    mask = np.ones((len(specs), len(models)), dtype=bool)
    for s, spec in enumerate(specs):
        allowed = allowed_models(spec)
        if allowed and num_gpu[s] > 0:
            mask[s] = [m in allowed for m in models]
    return mask


def build_shapes(workload: Workload, cluster: Cluster) -> Shapes:
    """Group the workload's pods into shapes and index the cluster's GPU models."""
    keys = workload.requests()
    index: dict[tuple[int, int, int, int, str], int] = {}
    pod_shape = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
    table = list(index)
    models = sorted(set(cluster.gpu_model))
    model_index = {m: j for j, m in enumerate(models)}
    num_gpu = np.array([k[2] for k in table], dtype=np.int64)
    specs = tuple(k[4] for k in table)
    model_ok = model_mask(specs, models, num_gpu)
    node_model = np.array([model_index[m] for m in cluster.gpu_model], dtype=np.int64)
    return Shapes(
        cpu=np.array([k[0] for k in table], dtype=np.int64),
        mem=np.array([k[1] for k in table], dtype=np.int64),
        num_gpu=num_gpu,
        gpu_milli=np.array([k[3] for k in table], dtype=np.int64),
        spec=specs,
        model_ok=model_ok,
        node_model=node_model,
        pod_shape=pod_shape,
        node_ok=model_ok[:, node_model],
        requests=[k[:4] for k in table],
        cpu_mem=[np.array(k[:2], dtype=np.int64) for k in table],
        restricted=[not bool(row.all()) for row in model_ok[:, node_model]],
    )


@dataclass(frozen=True, eq=False)
class TargetWorkload:
    """The FGD target workload M: task shapes (cpu, gpu_milli, num_gpu, gpu_spec) with probabilities."""

    cpu: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    spec: tuple[str, ...]
    prob: np.ndarray
    count: np.ndarray  # pods of each shape in the original list (prob = count / count.sum())


def target_workload(workload: Workload, coverage: float = TARGET_COVERAGE) -> TargetWorkload:
    """Most popular shapes of ``workload`` until they cover ``coverage`` of the pods, renormalised.

    Equal counts are ordered by the shape key, so the cut is deterministic.
    """
    counts = Counter(
        zip(
            workload.cpu_milli.tolist(),
            workload.gpu_milli.tolist(),
            workload.num_gpu.tolist(),
            workload.gpu_spec,
            strict=True,
        )
    )
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, n in ranked:
        chosen.append((key, n))
        covered += n
        if covered >= coverage * workload.size:
            break
    total = sum(n for _, n in chosen)
    return TargetWorkload(
        cpu=np.array([k[0] for k, _ in chosen], dtype=np.int64),
        gpu_milli=np.array([k[1] for k, _ in chosen], dtype=np.int64),
        num_gpu=np.array([k[2] for k, _ in chosen], dtype=np.int64),
        spec=tuple(k[3] for k, _ in chosen),
        prob=np.array([n / total for _, n in chosen], dtype=np.float64),
        count=np.array([n for _, n in chosen], dtype=np.int64),
    )
