"""What a dynamic run measures, per team and overall, and how.

- **Queue wait**: from a job's arrival to the moment all its pods first run (a preempted job's later waits are
  not added: its wait is the developer's first wait). Jobs that never start are reported apart, with their
  wait until the end of the run.
- **Blocked while idle** (GPU-hours): at every instant, the GPU demand that waits (in a queue, or admitted with
  pods not yet placed) and that idle GPUs of a pool it may use could have served, integrated over time. A
  waiting job's demand may go to any pool its team's queue lists and the job accepts; it is matched to idle
  GPUs greedily, jobs restricted to fewer pools first. Idle GPUs are the free GPUs of Ready nodes.
- **Utilisation**: allocated GPUs over the GPUs of Ready nodes, and over the GPUs of every node the pools may
  grow to.
- **Preemptions** and the GPU-hours their runs had done, thrown away; `waitForPodsReady` evictions apart.
- **Node-hours and cost**: Ready or provisioning nodes, integrated, at each pool's price per node-hour.
- **Share**: the GPU-hours each team ran over all teams', against its weight over all weights.

The :class:`Recorder` integrates these between the engine's events and builds the :class:`Result`; it is told
of each job's changes by the engine's calls and reads the run only through :class:`RunView` (the cluster's
allocation and which nodes are up).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Protocol

import numpy as np

from scheduler.fgd.model import MILLI
from scheduler.fgd.state import ClusterState
from scheduler.sim.dynamic.model import World
from scheduler.sim.dynamic.report import Result, TeamResult

HOUR = 3600.0
TIMELINE_POINTS = 400


class RunView(Protocol):
    """What the recorder reads of a run in progress: the cluster's allocation and which nodes are up."""

    @property
    def state(self) -> ClusterState: ...

    @property
    def ready(self) -> np.ndarray: ...

    @property
    def provisioning(self) -> np.ndarray: ...

    @property
    def node_pool(self) -> np.ndarray: ...

    @property
    def ready_version(self) -> int:
        """Bumps whenever ``ready`` or ``provisioning`` changes."""
        ...


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


class Recorder:
    """Integrates the run's quantities between events; builds the :class:`Result` at the end."""

    def __init__(
        self, world: World, view: RunView, allowed: list[list[int]], flavors: list[list[int]]
    ) -> None:
        """``allowed``: each job's pools; ``flavors``: each queue's pools in the order it tries them."""
        self.w, self.view = world, view
        jobs = world.jobs
        self.gpus = jobs.gpus.astype(np.float64)
        n_queues = len(world.queues)
        # Where each job's waiting demand may go: pools its queue lists and it accepts, fewest first.
        self.wait_key: list[tuple[int, ...]] = []
        for j in range(jobs.size):
            q = int(jobs.queue[j])
            accepts = set(allowed[j])
            self.wait_key.append(tuple(p for p in flavors[q] if p in accepts))
        self.demand: dict[tuple[int, tuple[int, ...]], float] = defaultdict(float)  # (queue, pools) -> GPUs
        self.last = 0.0
        self.blocked = np.zeros(n_queues)
        self.alloc_gpu_s = 0.0
        self.ready_gpu_s = 0.0
        self.node_s = np.zeros(len(world.pools))
        self.run_gpu_s = np.zeros(n_queues)
        self.preempt_count = np.zeros(n_queues, dtype=np.int64)
        self.preempt_gpu_s = np.zeros(n_queues)
        self.timeouts = 0
        self.unhostable = 0
        self.last_finish = 0.0
        self.started_at: dict[int, float] = {}
        self.first_wait: dict[int, float] = {}
        self.samples: list[tuple[float, float, float, int, float]] = []
        self.waiting_jobs = 0
        self.waiting_gpus = 0.0
        max_gpus = float(world.cluster.num_gpu[[n for p in world.pools for n in p.nodes]].sum())
        self.max_gpus = max_gpus
        self._ready_at = -1  # the run's ready_version the two cached sums below were taken at
        self._ready_gpus = 0.0
        self._up_nodes = np.zeros(len(world.pools))

    def _refresh(self) -> None:
        """GPUs of Ready nodes, and Ready or provisioning nodes per pool: recounted only when readiness changed."""
        view = self.view
        if self._ready_at != view.ready_version:
            self._ready_gpus = float(self.w.cluster.num_gpu[view.ready].sum())
            up = view.ready | view.provisioning
            n = len(self.w.pools)
            self._up_nodes = np.bincount(view.node_pool[up], minlength=n)[:n].astype(np.float64)
            self._ready_at = view.ready_version

    # ---- demand -------------------------------------------------------------------------------------

    def waiting(self, j: int, sign: int) -> None:
        q = int(self.w.jobs.queue[j])
        self.demand[(q, self.wait_key[j])] += sign * self.gpus[j]
        self.waiting_jobs += sign
        self.waiting_gpus += sign * self.gpus[j]

    def pending(self, j: int, sign: int, pool: int) -> None:
        """Job ``j``, admitted to ``pool``, has pods to place (+1) or no longer (-1)."""
        q = int(self.w.jobs.queue[j])
        self.demand[(q, (pool,))] += sign * self.gpus[j]
        self.waiting_jobs += sign
        self.waiting_gpus += sign * self.gpus[j]

    # ---- events -------------------------------------------------------------------------------------

    def started(self, j: int, t: float) -> None:
        self.started_at[j] = t
        if j not in self.first_wait:
            self.first_wait[j] = t - float(self.w.jobs.arrival[j])

    def stopped(self, j: int, t: float) -> None:
        q = int(self.w.jobs.queue[j])
        self.run_gpu_s[q] += (t - self.started_at.pop(j)) * self.gpus[j]

    def finished(self, j: int, t: float) -> None:
        """The job ran to its end (its GPU-hours were added by :meth:`stopped`)."""
        self.last_finish = max(self.last_finish, t)

    def preempted(self, j: int, t: float) -> None:
        q = int(self.w.jobs.queue[j])
        self.preempt_count[q] += 1
        if j in self.started_at:
            self.preempt_gpu_s[q] += (t - self.started_at[j]) * self.gpus[j]

    def timed_out(self, j: int) -> None:
        self.timeouts += 1

    # ---- integration --------------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        dt = t - self.last
        if dt <= 0:
            return
        view = self.view
        ready = view.ready
        self._refresh()
        self.alloc_gpu_s += dt * view.state.allocated_gpu_milli / MILLI
        self.ready_gpu_s += dt * self._ready_gpus
        self.node_s += dt * self._up_nodes
        if self.waiting_gpus > 1e-9:
            idle = np.bincount(
                view.node_pool[ready],
                weights=view.state.free_gpu_sum[ready] / MILLI,
                minlength=len(self.w.pools),
            )[: len(self.w.pools)]
            for (q, pools), gpus in sorted(self.demand.items(), key=lambda kv: len(kv[0][1])):
                left = gpus
                for p in pools:
                    if left <= 1e-9:
                        break
                    take = min(left, idle[p])
                    if take > 0:
                        idle[p] -= take
                        left -= take
                        self.blocked[q] += take * dt
        self.last = t

    def sample(self, t: float) -> None:
        alloc = self.view.state.allocated_gpu_milli / MILLI
        self._refresh()
        ready = self._ready_gpus
        self.samples.append((t, alloc, ready, self.waiting_jobs, self.waiting_gpus))

    # ---- the result ---------------------------------------------------------------------------------

    def result(self, end: float) -> Result:
        w = self.w
        jobs = w.jobs
        teams = []
        weights = np.array([q.weight for q in w.queues], dtype=np.float64)
        total_run = float(self.run_gpu_s.sum()) or 1.0
        waits: dict[str, list[float]] = {}
        all_waits: list[float] = []
        never = 0
        for q, queue in enumerate(w.queues):
            members = np.flatnonzero(jobs.queue == q).tolist()
            got = np.array([self.first_wait[j] for j in members if j in self.first_wait])
            censored = [end - float(jobs.arrival[j]) for j in members if j not in self.first_wait]
            never += len(censored)
            waits[queue.name] = got.tolist()
            all_waits += got.tolist()
            both = np.concatenate((got, np.array(censored))) if censored else got
            teams.append(
                TeamResult(
                    team=queue.name,
                    jobs=len(members),
                    started=len(got),
                    wait_p50_s=_pct(got, 50),
                    wait_p95_s=_pct(got, 95),
                    wait_max_s=float(both.max()) if len(both) else 0.0,
                    gpu_hours=float(self.run_gpu_s[q]) / HOUR,
                    share=float(self.run_gpu_s[q]) / total_run,
                    weight_share=float(weights[q] / weights.sum()) if weights.sum() else 0.0,
                    blocked_idle_gpu_hours=float(self.blocked[q]) / HOUR,
                    preempted=int(self.preempt_count[q]),
                    preempted_gpu_hours=float(self.preempt_gpu_s[q]) / HOUR,
                )
            )
        arr = np.array(all_waits)
        prices = [p.node_price_hour for p in w.pools]
        cost = (
            None
            if all(p is None for p in prices)
            else float(sum((p or 0.0) * s / HOUR for p, s in zip(prices, self.node_s, strict=True)))
        )
        return Result(
            label=w.settings.policy,
            makespan_s=self.last_finish,
            jobs=jobs.size,
            started=len(self.first_wait),
            never_started=never - self.unhostable,
            unhostable=self.unhostable,
            wait_p50_s=_pct(arr, 50),
            wait_p95_s=_pct(arr, 95),
            wait_max_s=max((t.wait_max_s for t in teams), default=0.0),
            blocked_idle_gpu_hours=float(self.blocked.sum()) / HOUR,
            utilisation_ready=self.alloc_gpu_s / self.ready_gpu_s if self.ready_gpu_s else 0.0,
            utilisation_max=self.alloc_gpu_s / (self.max_gpus * end) if end and self.max_gpus else 0.0,
            gpu_hours=float(self.run_gpu_s.sum()) / HOUR,
            preemptions=int(self.preempt_count.sum()),
            preempted_gpu_hours=float(self.preempt_gpu_s.sum()) / HOUR,
            ready_timeouts=self.timeouts,
            node_hours=float(self.node_s.sum()) / HOUR,
            cost=cost,
            teams=tuple(teams),
            timeline=self._timeline(),
            waits=waits,
        )

    def _timeline(self) -> dict[str, list[float]]:
        if not self.samples:
            return {"t": [], "allocated": [], "ready": [], "waiting_jobs": [], "waiting_gpus": []}
        data = np.array(self.samples, dtype=np.float64)
        if len(data) > TIMELINE_POINTS:  # keep the last sample of each of TIMELINE_POINTS equal time slices
            edges = np.linspace(data[0, 0], data[-1, 0], TIMELINE_POINTS + 1)[1:]
            idx = np.unique(np.minimum(np.searchsorted(data[:, 0], edges, side="right") - 1, len(data) - 1))
            data = data[idx]
        cols = ("t", "allocated", "ready", "waiting_jobs", "waiting_gpus")
        return {c: [round(float(v), 3) for v in data[:, i]] for i, c in enumerate(cols)}
