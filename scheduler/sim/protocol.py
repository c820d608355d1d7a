"""The FGD replay protocol's bookkeeping: pod order and inflation, the start-of-run check, and curve bucketing.

1. sort pods by name, shuffle with the seed;
2. inflate to ``inflation`` x the cluster's GPU capacity: append copies drawn uniformly with replacement from
   the original list, stopping before the copy that would overshoot (a list already above the target loses
   random pods until it fits);
3. after the replay, bucket the per-pod samples by arrived % (rounded, 0..max) and average each bucket.
"""

from __future__ import annotations

import numpy as np

from scheduler.fgd.model import Cluster, Workload
from scheduler.fgd.shapes import build_shapes
from scheduler.sim.errors import TraceError

INFLATION = 1.3
MAX_ARRIVED_PCT = 130


def order_and_inflate(workload: Workload, rng: np.random.Generator, target_milli: float) -> np.ndarray:
    """Indices into ``workload``: sorted by name, shuffled, then inflated (or trimmed) to ``target_milli``."""
    by_name = np.array(sorted(range(workload.size), key=lambda i: workload.names[i]), dtype=np.int64)
    order = by_name[rng.permutation(workload.size)]
    req = workload.gpu_request_milli
    total = int(req.sum())
    if total > target_milli:
        drop = rng.permutation(len(order))
        dropped = np.cumsum(req[order[drop]])
        cut = int(np.argmax(total - dropped <= target_milli)) + 1
        keep = np.ones(len(order), dtype=bool)
        keep[drop[:cut]] = False
        return order[keep]
    if total == 0:
        return order
    extra: list[np.ndarray] = []
    while True:
        draws = by_name[rng.integers(0, workload.size, size=workload.size)]
        reached = total + np.cumsum(req[draws])
        over = np.flatnonzero(reached > target_milli)
        if len(over):
            extra.append(draws[: over[0]])
            break
        extra.append(draws)
        total = int(reached[-1])
    return np.concatenate([order, *extra])


def rank_nodes(cluster: Cluster, rng: np.random.Generator) -> Cluster:
    """The cluster with each node's name prefixed by a random rank (``0042-<name>``), re-sorted by name.

    The paper artifact renames its nodes this way when it creates them (after ordering the pods, with the same
    seeded generator), so "the smallest name wins a tie" means "the node of lowest random rank wins": a random
    node priority, fixed for the whole run.
    """
    rank = rng.permutation(cluster.size)
    width = max(4, len(str(cluster.size - 1)))
    return Cluster.build(
        [f"{r:0{width}d}-{name}" for r, name in zip(rank, cluster.names, strict=True)],
        cluster.cpu_milli.tolist(),
        cluster.memory_mib.tolist(),
        cluster.num_gpu.tolist(),
        cluster.gpu_model,
    )


def trace_name(ranked: str) -> str:
    """A ranked node's name as the trace gives it: :func:`rank_nodes`'s prefix taken off."""
    return ranked.split("-", 1)[1]


def seed_order(
    cluster: Cluster, workload: Workload, seed: int, inflation: float = INFLATION
) -> tuple[np.ndarray, Cluster, np.random.Generator]:
    """A run's start with ``seed``: the pods' order (indices into ``workload``, inflated to ``inflation`` x the
    cluster's GPU capacity), the ranked nodes, and the generator the replay goes on drawing from.

    A replay through a real scheduler creates its nodes under these ranked names before the run (the paper
    artifact's nodes carry them too), so a placement that breaks ties by node name breaks them by the seed's
    rank there as in the simulator."""
    rng = np.random.default_rng(seed)
    order = order_and_inflate(workload, rng, inflation * cluster.gpu_capacity_milli)
    return order, rank_nodes(cluster, rng), rng


def unhostable_pods(cluster: Cluster, workload: Workload) -> list[int]:
    """Indices of the pods no node of the empty cluster can ever host (too big, or a GPU model it lacks).

    Pods never leave, so such a pod fails in every run; traces from real clusters have a few (a model that
    was retired, a node that left). Raises :class:`TraceError` for a cluster without GPUs.
    """
    if cluster.gpu_capacity_milli == 0:
        raise TraceError("the cluster has no GPUs; the replay measures GPU allocation against GPU capacity")
    shapes = build_shapes(workload, cluster)
    gpu_fit_count = (np.arange(cluster.max_gpus)[None, :] < cluster.num_gpu[:, None]).sum(axis=1)
    never = np.zeros(shapes.count, dtype=bool)
    for s in range(shapes.count):
        fits = (
            (cluster.cpu_milli >= shapes.cpu[s])
            & (cluster.memory_mib >= shapes.mem[s])
            & shapes.model_ok[s, shapes.node_model]
            & (gpu_fit_count >= shapes.num_gpu[s])
        )
        never[s] = not fits.any()
    return np.flatnonzero(never[shapes.pod_shape]).tolist()


def describe_pod(workload: Workload, pod: int, spec_label: str = "gpu_spec") -> str:
    """``file, row N (line N+1): pod 'x' (cpu_milli .., memory_mib .., num_gpu ..[, gpu_spec ..])``.

    ``spec_label`` names what the workload's gpu_spec column holds: the trace's GPU models, or, once a stack
    has routed the trace (`invoke simulate --stack`), the pools its Kueue flavors admit the pod to."""
    spec = f", {spec_label} {workload.gpu_spec[pod]}" if workload.gpu_spec[pod] else ""
    where = (
        f"{workload.source}, row {int(workload.rows[pod])} (line {int(workload.rows[pod]) + 1}): "
        if (workload.source)
        else ""
    )
    return (
        f"{where}pod {workload.names[pod]!r} (cpu_milli {workload.cpu_milli[pod]}, memory_mib "
        f"{workload.memory_mib[pod]}, num_gpu {workload.num_gpu[pod]}{spec})"
    )


def check_fits_somewhere(cluster: Cluster, workload: Workload) -> None:
    """Raise :class:`TraceError` for a cluster without GPUs or the first pod that fits no node of it
    (``--strict``; by default such pods are counted as failed and reported, see :func:`unhostable_pods`)."""
    never = unhostable_pods(cluster, workload)
    if never:
        pod = never[0]
        spec = f", gpu_spec {workload.gpu_spec[pod]}" if workload.gpu_spec[pod] else ""
        raise TraceError(
            f"pod {workload.names[pod]!r} (cpu_milli {workload.cpu_milli[pod]}, memory_mib "
            f"{workload.memory_mib[pod]}, num_gpu {workload.num_gpu[pod]}{spec}) is larger than every node of "
            f"the cluster ({len(never)} such pod(s); without --strict they are counted as failed)",
            path=workload.source,
            row=int(workload.rows[pod]) if workload.source else None,
        )


def bucket_curve(arrived_pct: np.ndarray, values: np.ndarray, max_pct: int = MAX_ARRIVED_PCT) -> np.ndarray:
    """Mean of ``values`` per rounded arrived % (0..max_pct); an empty bucket repeats the previous one."""
    x = np.clip(np.floor(arrived_pct + 0.5).astype(np.int64), 0, max_pct)
    sums = np.bincount(x, weights=values, minlength=max_pct + 1)
    counts = np.bincount(x, minlength=max_pct + 1)
    curve = np.full(max_pct + 1, np.nan)
    curve[counts > 0] = sums[counts > 0] / counts[counts > 0]
    last = values[0] if len(values) else 0.0
    for i in range(max_pct + 1):
        if np.isnan(curve[i]):
            curve[i] = last
        last = curve[i]
    return curve
