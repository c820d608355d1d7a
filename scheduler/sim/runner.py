"""The replay loop: one run (policy, seed) and many runs in parallel processes.

Scores live in a (shape, node) matrix. Placing a pod changes one node, which only marks that node's column
stale (for the shapes that still fit there: without departures a node never regains room); a pod's shape row
is refreshed for its stale nodes (one vectorised policy call), then the choice is an argmax over that row. Scores must therefore depend only on the scored node's own state (and the policy's
per-node bookkeeping), which holds for every registered policy; global choices (Random's draw, RoundRobin's
turn) happen in :meth:`Policy.choose_node`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.pool
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from scheduler.fgd.frag import NodeFragmentation, ShareRule
from scheduler.fgd.model import Cluster, Workload
from scheduler.fgd.shapes import build_shapes, target_workload
from scheduler.fgd.state import ClusterState
from scheduler.sim.policies import Context, Policy, make_policy
from scheduler.sim.policies.base import score_nodes
from scheduler.sim.protocol import (
    INFLATION,
    bucket_curve,
    check_fits_somewhere,
    seed_order,
    trace_name,
    unhostable_pods,
)

DEFAULT_SEEDS = tuple(range(42, 52))


@dataclass(frozen=True)
class RunResult:
    """One run. Curves have one value per arrived % 0..130 (percent values)."""

    policy: str
    seed: int
    allocated: tuple[float, ...]  # allocated GPU % of capacity
    frag_amount: tuple[float, ...]  # fragmentation / GPU capacity, %
    frag_ratio: tuple[float, ...]  # fragmentation / free GPU, %
    pods: int  # pods replayed (after inflation)
    failed: int  # pods that fit nowhere
    seconds: float
    unhostable: int = 0  # pods of the original list that no node of the empty cluster can host (all fail)

    def unallocated(self, arrived_pct: int = 100) -> float:
        """Unallocated GPU % at an arrived % (the paper's headline number at 100)."""
        return 100.0 - self.allocated[arrived_pct]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _policy(policy: str | Policy, params: dict[str, Any] | None) -> Policy:
    return make_policy(policy, **(params or {})) if isinstance(policy, str) else policy


@dataclass(frozen=True, eq=False)
class Replay:
    """Per-pod samples of one replay, in pod order. ``placements[i]`` is (node index, GPUs) or None (failed)."""

    arrived: np.ndarray  # cumulative requested milli-GPU, failed pods included
    allocated: np.ndarray  # allocated milli-GPU after the pod
    frag: np.ndarray  # cluster fragmentation F (milli-GPU) after the pod
    placements: list[tuple[int, list[int]] | None]
    state: ClusterState
    frag_state: NodeFragmentation

    @property
    def failed(self) -> int:
        return sum(p is None for p in self.placements)


def replay(
    cluster: Cluster,
    pods: Workload,
    policy: str | Policy,
    *,
    target: Workload | None = None,
    rng: np.random.Generator | None = None,
    params: dict[str, Any] | None = None,
    check: Callable[[ClusterState], None] | None = None,
    share_rule: ShareRule = "policy",
) -> Replay:
    """Place ``pods`` in the given order on an empty ``cluster`` (no shuffle, no inflation; protocol step 3).

    ``target`` is the workload whose shapes define the FGD target (default: ``pods``); ``check`` (tests) is
    called with the state after every pod, e.g. ``ClusterState.check``.
    """
    pol = _policy(policy, params)
    rng = rng if rng is not None else np.random.default_rng(0)
    shapes = build_shapes(pods, cluster)
    state = ClusterState(cluster)
    models = sorted(set(cluster.gpu_model))
    frag = NodeFragmentation(state, target_workload(target or pods), shapes.node_model, models)
    pol.bind(Context(cluster, state, shapes, frag, rng, share_rule, target or pods))

    n_shapes, n_nodes = shapes.count, cluster.size
    scores = np.full((n_shapes, n_nodes), -1, dtype=np.int64)
    share_gpu = np.zeros((n_shapes, n_nodes), dtype=np.int64)
    stale = np.ones((n_shapes, n_nodes), dtype=bool)
    is_share = shapes.is_share.tolist()
    req = shapes.gpu_request.tolist()
    cpu, mem, milli = shapes.cpu.tolist(), shapes.mem.tolist(), shapes.gpu_milli.tolist()
    static = np.column_stack((cluster.cpu_milli, cluster.memory_mib, cluster.num_gpu, shapes.node_model))

    default_choice = type(pol).choose_node is Policy.choose_node  # plain argmax: inline it
    live_frag = pol.live_frag  # FGD reads per-node fragmentation while placing; others get it at the end
    changed: list[tuple[int, int, int, np.ndarray]] = []
    track_placed = type(pol).placed is not Policy.placed
    n_pods = pods.size
    arrived = np.zeros(n_pods, dtype=np.int64)
    allocated = np.zeros(n_pods, dtype=np.int64)
    frag_total = np.zeros(n_pods, dtype=np.float64)
    placements: list[tuple[int, list[int]] | None] = []
    total_arrived = 0
    for i, s in enumerate(shapes.pod_shape.tolist()):
        stale_row, row = stale[s], scores[s]
        todo = stale_row.nonzero()[0]
        if len(todo):
            score, gpu = score_nodes(pol, s, todo, static, is_share[s])
            row[todo] = score
            if gpu is not None:
                share_gpu[s][todo] = gpu
            stale_row[todo] = False
        if default_choice:
            node = int(row.argmax())
            if row[node] < 0:
                node = -1
        else:
            node = pol.choose_node(row, s)
        total_arrived += req[s]
        if node < 0:
            placements.append(None)
        else:
            gpus = pol.choose_gpus(node, s, int(share_gpu[s, node]))
            state.allocate(node, cpu[s], mem[s], gpus, milli[s])
            if track_placed:
                pol.placed(node, s)
            if live_frag:
                frag.update(node)
            else:
                changed.append((i, node, int(state.free_cpu[node]), state.free_gpu[node].copy()))
            # pods never leave, so free resources only shrink: a shape that did not fit a node never will,
            # and only the shapes that still fit (or were never scored) need rescoring there
            stale[:, node] |= scores[:, node] >= 0
            placements.append((node, gpus))
        arrived[i] = total_arrived
        allocated[i] = state.allocated_gpu_milli
        frag_total[i] = frag.total
        if check is not None:
            check(state)
    if not live_frag:
        frag_total = _deferred_frag(frag, changed, n_pods)
    return Replay(arrived, allocated, frag_total, placements, state, frag)


def _deferred_frag(
    frag: NodeFragmentation, changed: list[tuple[int, int, int, np.ndarray]], n_pods: int
) -> np.ndarray:
    """Fragmentation after every pod from the recorded node changes (one vectorised pass at the end)."""
    totals = np.full(n_pods, frag.total)
    if changed:
        index, nodes, cpu, gpu = zip(*changed, strict=True)
        after = frag.replay_totals(np.array(nodes), np.array(cpu), np.array(gpu))
        steps = np.zeros(n_pods, dtype=np.int64)
        steps[np.array(index)] = 1
        # a failed pod keeps the total of the last placement before it
        totals = np.concatenate(([frag.total], after))[np.cumsum(steps)]
    return totals


def run_one(
    cluster: Cluster,
    workload: Workload,
    policy: str | Policy,
    seed: int,
    *,
    params: dict[str, Any] | None = None,
    inflation: float = INFLATION,
    check: Callable[[ClusterState], None] | None = None,
    share_rule: ShareRule = "policy",
    strict: bool = False,
) -> RunResult:
    """One run of the protocol: order and inflate ``workload`` with ``seed``, replay it, bucket the curves.

    A pod no node of the empty cluster can host fails like any pod that finds no room (counted in ``failed``
    and in ``unhostable``); with ``strict`` it raises :class:`TraceError` naming the file and row instead.
    """
    result, _ = run_placed(cluster, workload, policy, seed, params=params, inflation=inflation, check=check,
                           share_rule=share_rule, strict=strict)  # fmt: skip
    return result


Placement = tuple[str, list[int]] | None  # a pod's node (its name) and GPUs, or None where it failed


def run_placed(
    cluster: Cluster,
    workload: Workload,
    policy: str | Policy,
    seed: int,
    *,
    params: dict[str, Any] | None = None,
    inflation: float = INFLATION,
    check: Callable[[ClusterState], None] | None = None,
    share_rule: ShareRule = "policy",
    strict: bool = False,
) -> tuple[RunResult, list[Placement]]:
    """:func:`run_one`, and where each pod of the protocol's order went: two replays of one seed (a
    simulator's and a twin's) are compared pod by pod to find where they part. A node is named as the trace
    names it (without the protocol's rank)."""
    start = time.perf_counter()
    if strict:
        check_fits_somewhere(cluster, workload)
    never = len(unhostable_pods(cluster, workload))
    pol = _policy(policy, params)
    order, cluster, rng = seed_order(cluster, workload, seed, inflation)
    pods = workload.take(order)
    run = replay(cluster, pods, pol, target=workload, rng=rng, check=check, share_rule=share_rule)
    cap = run.state.capacity_gpu_milli
    x = run.arrived * 100.0 / cap
    free = cap - run.allocated
    ratio = np.divide(run.frag, free, out=np.zeros_like(run.frag), where=free > 0) * 100
    return RunResult(
        policy=pol.name,
        seed=seed,
        allocated=tuple(bucket_curve(x, run.allocated * 100.0 / cap).round(6).tolist()),
        frag_amount=tuple(bucket_curve(x, run.frag * 100.0 / cap).round(6).tolist()),
        frag_ratio=tuple(bucket_curve(x, ratio).round(6).tolist()),
        pods=pods.size,
        failed=run.failed,
        seconds=round(time.perf_counter() - start, 4),
        unhostable=never,
    ), [None if p is None else (trace_name(str(cluster.names[p[0]])), p[1]) for p in run.placements]


def _run_task(args: tuple[Cluster, Workload, str, int, dict[str, Any] | None, ShareRule]) -> RunResult:
    cluster, workload, policy, seed, params, share_rule = args
    return run_one(cluster, workload, policy, seed, params=params, share_rule=share_rule)


def run_many(
    cluster: Cluster,
    workload: Workload,
    policies: Sequence[str],
    seeds: Sequence[int] = DEFAULT_SEEDS,
    *,
    processes: int | None = None,
    on_done: Callable[[RunResult], None] | None = None,
    params: dict[str, dict[str, Any]] | None = None,
    share_rule: ShareRule = "policy",
    strict: bool = False,
) -> list[RunResult]:
    """Every (policy, seed) run, in parallel processes (``processes``: default the CPU count; 1 = in-process).

    ``on_done`` is called in this process as each run finishes (e.g. to advance a progress bar); ``params``
    maps a policy name to its parameters. Results come back in (policy, seed) order.
    """
    for name in policies:  # fail fast on bad names or parameters, before any process starts
        make_policy(name, **((params or {}).get(name) or {}))
    if strict:
        check_fits_somewhere(cluster, workload)
    else:
        unhostable_pods(cluster, workload)  # a cluster without GPUs is still an error
    tasks = [(cluster, workload, p, s, (params or {}).get(p), share_rule) for p in policies for s in seeds]
    workers = min(processes or os.cpu_count() or 1, len(tasks))
    results: dict[tuple[str, int], RunResult] = {}
    try:
        if workers <= 1:
            for task in tasks:
                result = _run_task(task)
                results[(task[2], task[3])] = result
                if on_done:
                    on_done(result)
        else:
            # Workers ignore the terminal's Ctrl-C and any stop of this process: this process decides, and
            # leaving the `with` on a stop terminates them at once (Pool.__exit__), queued runs and all. A
            # ProcessPoolExecutor would run every queued run first (its __exit__ waits for them; cpython
            # v3.11 Lib/concurrent/futures/_base.py Executor.__exit__, shutdown(wait=True)). A stop is held
            # back while the pool is built: one that lands inside Pool.__init__ leaves a pool nobody
            # terminates, whose worker handler replaces the workers killed below with workers that wait for
            # work forever.
            with _pool(workers) as pool:
                for index, result in pool.imap_unordered(_run_indexed, enumerate(tasks)):
                    results[(tasks[index][2], tasks[index][3])] = result
                    if on_done:
                        on_done(result)
    except BaseException as stop:
        if not isinstance(stop, Exception):  # a stop (Ctrl-C, a signal), not a failure of a run
            # Pool.terminate can race its own worker handler, which replaces a worker that just exited: a worker
            # started then waits for work forever, holding this command's output open, so none is left behind.
            for child in multiprocessing.active_children():
                child.kill()
                child.join(5)
            stop.add_note(f"{len(results)} of {len(tasks)} runs had finished; the others were abandoned")
        raise
    return [results[(p, s)] for p in policies for s in seeds]


_STOPS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _pool(workers: int) -> Iterator[multiprocessing.pool.Pool]:
    """A pool of `workers` built with stops held back, so that a stop always lands where leaving the `with`
    terminates it; one that came meanwhile is delivered once inside.

    Two holds, because a blocked signal mask is per thread: this thread's mask, inherited by the workers it
    forks and the pool's threads (so a worker never acts on a stop before its own handlers are set), and the
    stop handlers themselves, since a process-directed signal goes to any thread that lets it through (a
    progress bar's refresh thread) and Python then runs the handler in the main thread, wherever it is."""
    held = hasattr(signal, "pthread_sigmask")
    came: list[int] = []
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, lambda signum, _frame: came.append(signum)) for sig in _STOPS}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS) if held else set()
    try:
        with multiprocessing.Pool(workers, initializer=_worker_signals) as pool:
            if held:  # a stop still pending is taken by the holding handler here
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            _restore(handlers)
            if came:
                signal.raise_signal(came[0])  # the command's own handler now: it stops inside the `with`
            yield pool
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        _restore(handlers)


def _restore(handlers: dict[int, Any]) -> None:
    """Put back the stop handlers `_pool` replaced (once: it empties `handlers`)."""
    while handlers:
        sig, handler = handlers.popitem()
        signal.signal(sig, handler)


def _worker_signals() -> None:
    """A worker leaves interrupts to the process that started it, and ends at once when it is terminated
    (not through a stop handler it inherited). It is forked while stops are held back (`_pool`), so it
    lets them through again once its handlers are set."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


def _run_indexed(
    item: tuple[int, tuple[Cluster, Workload, str, int, dict[str, Any] | None, ShareRule]],
) -> tuple[int, RunResult]:
    return item[0], _run_task(item[1])


def mean_curve(results: Sequence[RunResult], field: str = "allocated") -> np.ndarray:
    """Mean over runs (typically one policy's seeds) of one curve field."""
    return np.mean([getattr(r, field) for r in results], axis=0)
