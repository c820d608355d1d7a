"""What a dynamic run measures, per team and overall, and how.

- **Queue wait**: from a job's arrival to the moment all its pods first run (the developer's first wait). Jobs
  that never start are reported apart, with their wait until the end of the run.
- **Queued time**: every second a job spends not running between its arrival and its end: the first wait plus
  each wait after a preemption (a preempted job queues again), and for a job that never starts (again) its
  wait until the end of the run. **Slowdown**: a finished job's time from arrival to finish over its trace
  duration, bounded below at ``SLOWDOWN_BOUND_S`` of duration so very short jobs do not dominate the mean
  (Feitelson's bounded slowdown); a job on a GPU slower than the reference runs longer, and that counts.
- **Blocked while idle** (GPU-hours): at every instant, the GPU demand that waits (in a queue, or admitted with
  pods not yet placed) and that idle GPUs of a pool it may use could have served, integrated over time. A
  waiting job's demand may go to any pool its team's queue lists and the job accepts; it is matched to idle
  GPUs greedily, jobs restricted to fewer pools first. Idle GPUs are the free GPUs of Ready nodes. Each
  matched GPU-hour is **blocked by policy** when a Ready node of that pool could have run one of the job's
  pods right then (GPUs, CPU and memory: the quota, the queue's order or a limit held it back), and **blocked
  by fragmentation** when the idle GPUs are spread so that no node could.
- **Utilisation**: allocated GPUs over the GPUs of Ready nodes, and over the GPUs of every node the pools may
  grow to. **Per pool**: the runs started there, the GPU-hours they ran and those over the pool's Ready
  GPU-hours, so a pool that never receives work shows as such.
- **Preemptions** and the GPU-hours their runs had done, thrown away; `waitForPodsReady` evictions apart. Per
  pool, how often each queue's jobs evicted each queue's: two queues that evict each other there both ways
  show in it (:mod:`~scheduler.sim.dynamic.exchanges`).
- **Node-hours and cost**: Ready or provisioning nodes, integrated, at each pool's price per node-hour; a
  capacity block is paid for whole: every node of the block for the part of its window the run covers, used or
  not (Amazon EC2 Capacity Blocks for ML are paid up front for the reservation's duration).
- **Share**: the GPU-hours each team ran over all teams', against its weight over all weights.

The :class:`Recorder` integrates these between the engine's events and builds the :class:`Result`; it is told
of each job's changes by the engine's calls and reads the run only through :class:`RunView` (the cluster's
allocation and which nodes are up).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any, Protocol

import numpy as np

from scheduler.fgd.model import MILLI
from scheduler.fgd.state import ClusterState
from scheduler.sim.dynamic.model import Pool, World
from scheduler.sim.dynamic.placement import FEW
from scheduler.sim.dynamic.report import PoolResult, QueuePreemptions, Result, TeamResult

HOUR = 3600.0
TIMELINE_POINTS = 400
SLOWDOWN_BOUND_S = 10.0  # bounded slowdown's threshold (Feitelson, "Metrics for parallel job scheduling")


def _billed_s(pool: Pool, up_s: float, end: float) -> float:
    """Node-seconds ``pool`` is paid for in a run ending at ``end``: the seconds its nodes were up, or for a
    capacity block every node of the block over its window (as far as the run goes)."""
    if pool.window is None:
        return up_s
    start, stop = pool.window
    return len(pool.nodes) * max(0.0, min(stop, end) - max(start, 0.0))


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

    @property
    def alloc_version(self) -> int:
        """Bumps whenever a pod is placed or released."""
        ...

    @property
    def changed(self) -> list[int]:
        """The nodes whose allocation or readiness changed, in order, one entry per change."""
        ...


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


class _Group:
    """A demand group of blocked-while-idle: its key (queue, pools, pod need), its pools (each once, in order) and
    as bits, and what it took in the last walk: the pools, the GPUs taken from each and the pool's idle GPUs
    left after, the matches they made, the pools taken from as bits; whether it took its whole demand from one
    pool, and the pools before that one. ``stale``: its demand changed since; ``here``: it still waits."""

    __slots__ = (
        "afters", "ahead", "amounts", "here", "key", "mask", "matches", "need", "pools", "q", "stale", "taken",
        "took", "walk", "whole",
    )  # fmt: skip

    def __init__(
        self, key: tuple[int, tuple[int, ...], tuple[int, int, int, int]], pools: tuple[int, ...], walk: int,
        need: int,
    ) -> None:  # fmt: skip
        self.key = key
        self.q = key[0]
        self.need = need  # its pod need's number (Recorder._need_id), what its fit answers are kept under
        self.pools = pools
        self.mask = sum(1 << p for p in pools)
        self.walk = walk  # the walks before it came
        self.taken: list[int] = []
        self.amounts: list[float] = []
        self.afters: list[float] = []
        self.matches: list[tuple[int, float, bool]] = []
        self.took = 0
        self.whole = False  # it took its whole demand from one pool
        self.ahead = 0  # the pools before that one, as bits
        self.stale = True
        self.here = True


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
        # A pod's needs, for "could a node have run it": (whole GPUs, milli of each, milli-CPU, MiB)
        wl = jobs.workload
        self.pod_need = list(
            zip(
                wl.num_gpu.tolist(),
                wl.gpu_milli.tolist(),
                wl.cpu_milli.tolist(),
                wl.memory_mib.tolist(),
                strict=True,
            )
        )
        # (queue, pools, pod needs) -> waiting GPUs; a group is dropped when nothing of it waits
        self.demand: dict[tuple[int, tuple[int, ...], tuple[int, int, int, int]], float] = defaultdict(float)
        self.last = 0.0
        self.blocked = [0.0] * n_queues  # GPU-seconds blocked while idle, per queue
        self.blocked_policy = 0.0  # GPU-seconds of ``blocked`` a node could have run
        # (pod need's number x pools + pool) -> (could a Ready node of the pool run it, a node that could or -1,
        # the position in ``changed`` the answer holds at); see _node_fits. A need is numbered once, so the key
        # is an int, not a tuple hashed again at every look-up.
        self._fits: dict[int, tuple[bool, int, int]] = {}
        self._need_id: dict[tuple[int, int, int, int], int] = {}
        self._needs: list[tuple[int, int, int, int]] = []
        self._n_pools = len(world.pools)
        self._fits_ready = -1  # the ready_version ``_fits`` holds for
        self._fits_seen = 0  # the entries of ``changed`` ``_stamp`` has seen
        self._stamp = [-1] * world.cluster.size  # per node: its last entry in ``changed``
        self._node_pool = view.node_pool.tolist()
        # per pool: the positions in ``changed`` of its nodes' entries (as far as ``_sync_fits`` has seen)
        self._pool_pos: list[list[int]] = [[] for _ in world.pools]
        # Each pool's free GPUs over its Ready nodes, summed node by node in index order (a float sum, whose
        # rounding depends on that order): each Ready node's term and the running sums, so a change at a node
        # sums again only from its place on (see _idle_gpus)
        self._terms: list[np.ndarray[Any, Any]] = []
        self._sums: list[np.ndarray[Any, Any]] = []
        self._slot = [-1] * world.cluster.size  # a Ready node's place in its pool's list, -1 if none
        self._idle = [0.0] * len(world.pools)
        self._idle_ready = -1
        self._idle_seen = 0
        # The demand groups in the order blocked-while-idle walks them: by their number of pools, then in the
        # order they came (a group that goes and comes again comes last); each keeps what it matched in the last
        # walk, so a walk evaluates again only the groups that can match otherwise (see _match)
        self._groups: dict[int, list[_Group]] = {}
        self._lengths: list[int] = []  # the keys of ``_groups``, sorted
        self._order: list[_Group] | None = None  # the groups in walk order, None when a group came or went
        self._group_of: dict[tuple[int, tuple[int, ...], tuple[int, int, int, int]], _Group] = {}
        self._gone = 0  # groups gone, still in ``_groups`` (each dropped once it took nothing in a walk)
        self._born = 0  # groups that came since the last walk
        self._walks = 0
        self._unique: dict[tuple[int, ...], tuple[int, ...]] = {}  # a group's pools, each once
        self._start: list[float] = [0.0] * len(world.pools)  # each pool's idle GPUs when the last walk began
        # Where the last walk's state can be taken up again: per pool, the places (in walk order) of the groups
        # that took from it and its idle GPUs after each; the places of the groups that matched and the matches
        # before each
        self._took_at: list[list[int]] = [[] for _ in world.pools]
        self._left_at: list[list[float]] = [[] for _ in world.pools]
        self._match_at: list[int] = []
        self._matches_before: list[int] = []
        self._walk_seen = 0
        self._walk_ready = -1
        # The last walk's matched GPUs, in walk order: (queue, GPUs, a node could have run it), and what it
        # holds for: the demand's version, the entries of ``changed`` and the ready_version it saw. The same
        # demand on the same nodes matches alike, so a step with neither changed adds the same amounts.
        self._matched: list[tuple[int, float, bool]] = []
        self._matched_at = (-1, -1, -1)
        self._demand_version = 0
        n_pools = len(world.pools)
        self.pool_runs = [0] * n_pools
        self.pool_gpu_s = [0.0] * n_pools
        self.pool_ready_gpu_s = np.zeros(n_pools)
        self.run_pool: dict[int, int] = {}
        self.queued_since: dict[int, float] = {}  # a preempted job's return to the queue
        self.queued_s = [0.0] * jobs.size
        self.arrival = jobs.arrival.tolist()
        self.queue_of = jobs.queue.tolist()
        self.gpu_list = self.gpus.tolist()
        self.wait_group = [(q, self.wait_key[j], self.pod_need[j]) for j, q in enumerate(self.queue_of)]
        self.finished_at: dict[int, float] = {}
        self.alloc_gpu_s = 0.0
        self.ready_gpu_s = 0.0
        self.node_s = np.zeros(len(world.pools))
        self.run_gpu_s = np.zeros(n_queues)
        self.preempt_count = np.zeros(n_queues, dtype=np.int64)
        self.preempt_gpu_s = np.zeros(n_queues)
        # (pool, preemptor's queue, victim's queue) -> preemptions: counted by the engine where it evicts
        self.preempted_by: dict[tuple[int, int, int], int] = {}
        self.pool_timeouts = [0] * len(world.pools)  # waitForPodsReady evictions, by pool
        self.unhostable_jobs: set[int] = set()  # left out by the engine: no wait counted
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
        self._pool_ready_gpus = np.zeros(len(world.pools))
        self._pool_mark = 0.0  # since when _pool_ready_gpus holds
        self._ready_in: list[np.ndarray[Any, Any]] = []

    @property
    def unhostable(self) -> int:
        return len(self.unhostable_jobs)

    def _refresh(self, t: float) -> None:
        """GPUs of Ready nodes, and Ready or provisioning nodes per pool: recounted only when readiness changed
        (at ``t``, when the pools' Ready GPU-seconds held until then are added up)."""
        view = self.view
        if self._ready_at != view.ready_version:
            self.pool_ready_gpu_s += (t - self._pool_mark) * self._pool_ready_gpus
            self._pool_mark = t
            self._ready_gpus = float(self.w.cluster.num_gpu[view.ready].sum())
            up = view.ready | view.provisioning
            n = len(self.w.pools)
            self._up_nodes = np.bincount(view.node_pool[up], minlength=n)[:n].astype(np.float64)
            ready = np.flatnonzero(view.ready)
            pools = view.node_pool[ready]
            gpus = self.w.cluster.num_gpu[ready].astype(np.float64)
            self._pool_ready_gpus = np.bincount(pools, weights=gpus, minlength=n)[:n].astype(np.float64)
            self._ready_in = [ready[pools == p] for p in range(n)]
            self._ready_at = view.ready_version

    def _idle_gpus(self) -> list[float]:
        """Free GPUs on the Ready nodes of each pool, summed node by node in index order.

        The float sum's rounding depends on that order, so it is kept as running sums over the pool's Ready
        nodes: a node that changed sums again from its place on, from the running sum before it, which gives
        the same float as summing the whole pool again (the same additions in the same order). Every pool is
        summed afresh when readiness changed."""
        view = self.view
        changed = view.changed
        free = view.state.free_gpu_sum
        if self._idle_ready != view.ready_version:
            self._idle_ready = view.ready_version
            slot = np.full(len(self._node_pool), -1, dtype=np.int64)
            self._terms, self._sums = [], []
            for p, nodes in enumerate(self._ready_in):
                slot[nodes] = np.arange(len(nodes))
                terms = free[nodes] / MILLI
                self._terms.append(terms)
                self._sums.append(np.cumsum(terms))
                self._idle[p] = float(self._sums[p][-1]) if len(nodes) else 0.0
            self._slot = slot.tolist()
        elif self._idle_seen < len(changed):
            first: dict[int, int] = {}  # per pool, the first place changed
            slots, node_pool, all_terms = self._slot, self._node_pool, self._terms
            for node in changed[self._idle_seen :]:
                at = slots[node]
                if at >= 0:
                    p = node_pool[node]
                    all_terms[p][at] = free[node] / MILLI
                    if first.get(p, at) >= at:
                        first[p] = at
            for p, k in first.items():
                terms, sums = all_terms[p], self._sums[p]
                tail = terms[k:].copy()
                if k:
                    tail[0] += sums[k - 1]
                np.cumsum(tail, out=sums[k:])
                self._idle[p] = float(sums[-1])
        self._idle_seen = len(changed)
        return list(self._idle)

    def _sync_fits(self) -> None:
        """Bring the kept fit answers up to this step: dropped if readiness changed, each changed node's last
        change noted."""
        view = self.view
        changed = view.changed
        if self._fits_ready != view.ready_version:
            self._fits.clear()
            self._fits_ready = view.ready_version
        stamp, node_pool, pool_pos = self._stamp, self._node_pool, self._pool_pos
        for i in range(self._fits_seen, len(changed)):
            node = changed[i]
            stamp[node] = i
            pool = node_pool[node]
            if pool >= 0:
                pool_pos[pool].append(i)
        self._fits_seen = len(changed)

    def _node_fits(self, p: int, nid: int) -> bool:
        """Whether a Ready node of pool ``p`` could run a pod of need number ``nid`` now (its GPUs, CPU and
        memory).

        An answer is kept with the position in ``changed`` it holds at, and for a yes the pool's first node
        that fits then (in index order). A yes holds while that node is unchanged. A no is checked again only
        on the pool's nodes changed since (the others are as they were). A yes whose node changed: the nodes
        before it that did not change still do not fit, so the first that fits now is one of the changed nodes
        before it, else that node itself, else a node after it. Readiness changing drops every answer."""
        now = self._fits_seen  # _sync_fits ran for this step
        need = self._needs[nid]
        key = nid * self._n_pools + p
        known = self._fits.get(key)
        if known is None:
            found = self._first_of(self._ready_in[p], need, ready=True)
        else:
            got, witness, at = known
            stamp = self._stamp
            if got and stamp[witness] < at:
                return True
            pos = self._pool_pos[p]
            first = bisect.bisect_left(pos, at)
            changed = self.view.changed
            touched = sorted({changed[i] for i in pos[first:]})  # the pool's nodes changed since
            if not got:
                found = self._first_of(touched, need) if touched else -1
            else:
                found = self._first_of([n for n in touched if n < witness], need)
                if found < 0:
                    found = self._first_of([witness], need)
                if found < 0:
                    nodes = self._ready_in[p]
                    after = nodes[int(np.searchsorted(nodes, witness, side="right")) :]
                    found = self._first_of(after, need, ready=True)
        self._fits[key] = (found >= 0, found, now)
        return found >= 0

    def _first_of(
        self, nodes: list[int] | np.ndarray, need: tuple[int, int, int, int], ready: bool = False
    ) -> int:
        """The first of ``nodes`` (ascending; ``ready``: all Ready) that is Ready and has room for a pod with
        ``need`` now, or -1: a few tested in Python (numpy's cost per call would dominate), more with numpy."""
        if len(nodes) <= FEW:
            return self._first_fit(nodes.tolist() if isinstance(nodes, np.ndarray) else nodes, need)
        at = np.asarray(nodes, dtype=np.int64)
        if not ready:
            at = at[self.view.ready[at]]
        ok = self._fit_mask(at, need)
        return int(at[int(ok.argmax())]) if ok.any() else -1

    def _first_fit(self, nodes: list[int], need: tuple[int, int, int, int]) -> int:
        """The first of ``nodes`` (ascending) that is Ready and has room for a pod with ``need`` now, or -1,
        node by node in Python (:meth:`_fit_mask`'s test)."""
        gpus, milli, cpu, mem = need
        st = self.view.state
        ready, res, free_gpu = self.view.ready, st.free_res, st.free_gpu
        whole = milli >= MILLI
        least = max(gpus, 1)
        for node in nodes:
            if not ready[node]:
                continue
            free_cpu, free_mem, _ = res[node].tolist()
            if free_cpu < cpu or free_mem < mem:
                continue
            free = free_gpu[node].tolist()
            if whole:
                if sum(1 for x in free if x == MILLI) >= gpus:
                    return node
            elif sum(1 for x in free if x >= milli) >= least:
                return node
        return -1

    def _fit_mask(self, nodes: np.ndarray, need: tuple[int, int, int, int]) -> np.ndarray:
        """Which of ``nodes`` have room for a pod with ``need`` now."""
        gpus, milli, cpu, mem = need
        st = self.view.state
        free = st.free_gpu[nodes]
        if milli >= MILLI:
            gpu_ok = (free == MILLI).sum(axis=1) >= gpus
        else:
            gpu_ok = (free >= milli).sum(axis=1) >= max(gpus, 1)
        return np.asarray(gpu_ok & (st.free_cpu[nodes] >= cpu) & (st.free_mem[nodes] >= mem))

    # ---- demand -------------------------------------------------------------------------------------

    def _demand(self, key: tuple[int, tuple[int, ...], tuple[int, int, int, int]], gpus: float) -> None:
        self._demand_version += 1
        demand = self.demand
        left = demand.get(key, 0.0) + gpus
        group = self._group_of.get(key)
        if left > 1e-9:
            demand[key] = left
            if group is None:
                pools = self._unique.get(key[1])
                if pools is None:
                    pools = self._unique[key[1]] = tuple(dict.fromkeys(key[1]))
                nid = self._need_id.get(key[2])
                if nid is None:
                    nid = self._need_id[key[2]] = len(self._needs)
                    self._needs.append(key[2])
                group = self._group_of[key] = _Group(key, pools, self._walks, nid)
                self._born += 1
                length = len(key[1])
                if length not in self._groups:
                    self._groups[length] = []
                    self._lengths = sorted(self._groups)
                self._groups[length].append(group)
                self._order = None
            group.stale = True
        else:
            demand.pop(key, None)
            if group is not None:
                del self._group_of[key]
                members = self._groups[len(key[1])]
                if group.walk == self._walks and members[-1] is group:  # no walk saw it: dropped at once
                    members.pop()
                    self._order = None
                    self._born -= 1
                else:  # kept in its place, matching nothing, until the next walk has passed it
                    group.stale, group.here = True, False
                    self._gone += 1

    def waiting(self, j: int, sign: int) -> None:
        gpus = sign * self.gpu_list[j]
        self._demand(self.wait_group[j], gpus)
        self.waiting_jobs += sign
        self.waiting_gpus += gpus

    def pending(self, j: int, sign: int, pool: int) -> None:
        """Job ``j``, admitted to ``pool``, has pods to place (+1) or no longer (-1)."""
        gpus = sign * self.gpu_list[j]
        self._demand((self.queue_of[j], (pool,), self.pod_need[j]), gpus)
        self.waiting_jobs += sign
        self.waiting_gpus += gpus

    # ---- events -------------------------------------------------------------------------------------

    def started(self, j: int, t: float, pool: int) -> None:
        """Every pod of job ``j`` runs, in ``pool``, from ``t``."""
        self.started_at[j] = t
        self.run_pool[j] = pool
        self.pool_runs[pool] += 1
        if j not in self.first_wait:
            wait = t - self.arrival[j]
            self.first_wait[j] = wait
            self.queued_s[j] += wait
        elif j in self.queued_since:
            self.queued_s[j] += t - self.queued_since.pop(j)

    def stopped(self, j: int, t: float) -> None:
        ran = (t - self.started_at.pop(j)) * self.gpu_list[j]
        self.run_gpu_s[self.queue_of[j]] += ran
        self.pool_gpu_s[self.run_pool.pop(j)] += ran

    def finished(self, j: int, t: float) -> None:
        """The job ran to its end (its GPU-hours were added by :meth:`stopped`)."""
        self.last_finish = max(self.last_finish, t)
        self.finished_at[j] = t

    def preempted(self, j: int, t: float) -> None:
        """Job ``j`` is evicted at ``t`` for another; a running one queues again from ``t``."""
        q = int(self.w.jobs.queue[j])
        self.preempt_count[q] += 1
        if j in self.started_at:
            self.preempt_gpu_s[q] += (t - self.started_at[j]) * self.gpus[j]
            self.queued_since[j] = t

    def timed_out(self, j: int, pool: int) -> None:
        """Job ``j``'s admission to ``pool`` is evicted by the waitForPodsReady timeout."""
        self.pool_timeouts[pool] += 1

    # ---- integration --------------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        dt = t - self.last
        if dt <= 0:
            return
        view = self.view
        self._refresh(self.last)
        self.alloc_gpu_s += dt * view.state.allocated_gpu_milli / MILLI
        self.ready_gpu_s += dt * self._ready_gpus
        self.node_s += dt * self._up_nodes
        if self.waiting_gpus > 1e-9:
            idle = self._idle_gpus()
            if not any(x > 0 for x in idle):  # nothing idle: nothing blocked while idle
                self.last = t
                return
            seen = (self._demand_version, len(view.changed), view.ready_version)
            if seen != self._matched_at:
                self._matched = self._match(idle)
                self._matched_at = seen
            blocked = self.blocked
            for q, take, fit in self._matched:
                blocked[q] += take * dt
                if fit:
                    self.blocked_policy += take * dt
        self.last = t

    def _match(self, idle: list[float]) -> list[tuple[int, float, bool]]:
        """The waiting demand matched to ``idle`` (each pool's idle GPUs, used up here) greedily, groups restricted
        to fewer pools first: (queue, GPUs, could a Ready node of the pool run one of its pods) per match, in
        order.

        A group's matches depend only on its demand, the idle GPUs of its pools when its turn comes, and those
        pools' fit answers. The walk takes the last walk up again before the first group whose demand changed,
        whose pools' idle GPUs changed, or which took from a pool whose nodes changed since: every group before
        it matches as it did, and each pool's idle GPUs there are those the last walk left. From there it goes
        through the groups beside a replay of the last walk (each pool's idle GPUs as that walk had them at the
        same place, from the takes each group keeps): a group whose demand did not change, whose pools have the
        same idle GPUs in both, and which took nothing from a pool whose nodes changed, matches as it did, so it
        is not evaluated again (its takes are applied to both), and one that took its whole demand from one pool
        takes it again where that pool still has as much. Past the last group whose demand changed, once every
        pool has the same idle GPUs in both, the rest of the last walk is taken as it was (the fit of its takes
        from pools whose nodes changed asked again). The walk stops where no pool has idle GPUs left in
        either."""
        self._sync_fits()
        view = self.view
        n = len(idle)
        if self._walk_ready != view.ready_version:
            refit = (1 << n) - 1
        else:
            refit, seen = 0, self._walk_seen
            for p, pos in enumerate(self._pool_pos):
                if pos and pos[-1] >= seen:
                    refit |= 1 << p
        self._walk_seen = self._fits_seen
        self._walk_ready = view.ready_version
        new, old = idle, self._start
        self._start = idle.copy()
        dirty = 0  # pools whose idle GPUs differ from the last walk's at the same place
        for p, x in enumerate(new):
            if x != old[p]:
                dirty |= 1 << p
        groups = self._groups
        start, born = 0, self._born
        self._born = 0
        self._walks += 1
        if self._gone > 16 and 4 * self._gone > len(self._group_of):
            # drop the gone groups that took nothing in the last walk (no walk sees them): places move, so
            # this walk starts from the first group and takes nothing of the last one after it either
            for length, members in groups.items():
                groups[length] = [g for g in members if g.here or g.taken]
            self._gone = sum(not g.here for members in groups.values() for g in members)
            order = self._order = [g for length in self._lengths for g in groups[length]]
            last = len(order)
        else:
            kept = self._order
            order = kept if kept is not None else [g for length in self._lengths for g in groups[length]]
            self._order = order
            for start, g in enumerate(order):  # noqa: B007 (the place it stops at is used below)
                if g.stale or g.mask & dirty or g.took & refit:
                    break
            else:
                start = len(order)
            last = start  # the last group whose demand changed
            for j in range(len(order) - 1, start, -1):
                if order[j].stale:
                    last = j
                    break
        took_at, left_at = self._took_at, self._left_at
        kept_at: list[list[int]] = []  # the last walk's takes from ``start`` on, per pool, and what they left
        kept_left: list[list[float]] = []
        live = 0  # pools with idle GPUs in either walk
        for p in range(n):
            at = took_at[p]
            k = bisect.bisect_left(at, start) if at else 0
            if k:  # a group before ``start`` took from it, so its idle GPUs did not change
                new[p] = old[p] = left_at[p][k - 1]
            kept_at.append(at[k:])
            kept_left.append(left_at[p][k:])
            del at[k:], left_at[p][k:]
            if new[p] > 0 or old[p] > 0:
                live |= 1 << p
        k = bisect.bisect_left(self._match_at, start)
        match_at, before, last_matched = self._match_at, self._matches_before, self._matched
        kept_match_at, kept_before = match_at[k:], before[k:]
        matched = last_matched[: before[k]] if k < len(before) else last_matched[:]
        del match_at[k:], before[k:]
        demand, fits, known, stamp, width = (
            self.demand,
            self._node_fits,
            self._fits,
            self._stamp,
            self._n_pools,
        )
        for i in range(start, len(order)):
            if not live:
                break
            if i > last and not dirty:
                # the groups from here on match as they did, on the same idle GPUs; they were ``born`` places
                # earlier in the last walk (the groups that came since are all before here)
                for p, at in enumerate(kept_at):
                    j = bisect.bisect_left(at, i - born)
                    took_at[p] += [x + born for x in at[j:]]
                    left_at[p] += kept_left[p][j:]
                j = bisect.bisect_left(kept_match_at, i - born)
                if j < len(kept_match_at):
                    shift = len(matched) - kept_before[j]
                    match_at += [x + born for x in kept_match_at[j:]]
                    before += [b + shift for b in kept_before[j:]]
                    matched += last_matched[kept_before[j] :]
                # asked again whether a node could run them, where the pool's nodes changed
                for p in range(n):
                    if refit >> p & 1:
                        at = took_at[p]
                        for x in at[bisect.bisect_left(at, i) :]:
                            g = order[x]
                            hit = known.get(g.need * width + p)
                            fit = (hit is not None and hit[0] and stamp[hit[1]] < hit[2]) or fits(p, g.need)
                            o = g.taken.index(p)
                            q, take, was_fit = g.matches[o]
                            if fit != was_fit:
                                g.matches = [*g.matches[:o], (q, take, fit), *g.matches[o + 1 :]]
                                matched[before[bisect.bisect_left(match_at, x)] + o] = (q, take, fit)
                break
            g = order[i]
            if not g.mask & live:  # no idle GPUs for it in either walk: it takes nothing
                g.stale = False
                if not g.here:  # gone: it takes nothing in any walk from now on
                    g.mask = 0
                continue
            if not (g.stale or g.mask & dirty or g.took & refit):
                if g.whole:  # one pool, as most groups take from
                    p, after = g.taken[0], g.afters[0]
                    new[p] = old[p] = after
                    took_at[p].append(i)
                    left_at[p].append(after)
                    if not after > 0:
                        live &= ~(1 << p)
                else:
                    for p, after in zip(g.taken, g.afters, strict=True):
                        new[p] = old[p] = after
                        took_at[p].append(i)
                        left_at[p].append(after)
                        if not after > 0:
                            live &= ~(1 << p)
                if g.matches:
                    match_at.append(i)
                    before.append(len(matched))
                    matched += g.matches
                continue
            was = g.taken
            if g.whole and not (g.stale or g.ahead & dirty):
                # It took its whole demand from one pool, the pools before it have no idle GPUs in either walk:
                # if that pool has as many idle GPUs now, it takes the same again (asked again whether a node
                # could run it if the pool's nodes changed)
                p = was[0]
                old[p] = g.afters[0]
                free, want = new[p], g.amounts[0]
                if not free < want:
                    new[p] = free = free - want
                    g.afters = [free]
                    if g.took & refit:
                        hit = known.get(g.need * width + p)
                        fit = (hit is not None and hit[0] and stamp[hit[1]] < hit[2]) or fits(p, g.need)
                        if fit != g.matches[0][2]:
                            g.matches = [(g.q, want, fit)]
                    took_at[p].append(i)
                    left_at[p].append(free)
                    bit = 1 << p
                    if free != old[p]:
                        dirty |= bit
                    else:
                        dirty &= ~bit
                    if not (free > 0 or old[p] > 0):
                        live &= ~bit
                    match_at.append(i)
                    before.append(len(matched))
                    matched += g.matches
                    continue
            for p, after in zip(was, g.afters, strict=True):  # the last walk's state after this group
                old[p] = after
            left = demand[g.key] if g.here else 0.0
            taken: list[int] = []
            amounts: list[float] = []
            afters: list[float] = []
            for p in g.pools:
                if left <= 1e-9:
                    break
                free = new[p]
                take = free if free < left else left  # min(left, free), the first of equals
                if take > 0:
                    new[p] = free = free - take
                    left -= take
                    taken.append(p)
                    amounts.append(take)
                    afters.append(free)
                    took_at[p].append(i)
                    left_at[p].append(free)
            if amounts != g.amounts or taken != was or g.took & refit:  # else the same matches
                q, need = g.q, g.need
                matches: list[tuple[int, float, bool]] = []
                took = 0
                for p, take in zip(taken, amounts, strict=True):
                    hit = known.get(need * width + p)  # a yes whose node is unchanged, without the call
                    if hit is not None and hit[0] and stamp[hit[1]] < hit[2]:
                        matches.append((q, take, True))
                    else:
                        matches.append((q, take, fits(p, need)))
                    took |= 1 << p
                g.matches, g.took = matches, took
            g.taken, g.amounts, g.afters, g.stale = taken, amounts, afters, False
            g.whole = len(taken) == 1 and left <= 0.0
            if g.whole:
                g.ahead = sum(1 << p for p in g.pools[: g.pools.index(taken[0])])
            if not g.here:  # gone: it takes nothing in any walk from now on
                g.mask = 0
            for p in was + taken:  # the other pools' idle GPUs are as they were, in both walks
                bit = 1 << p
                if new[p] != old[p]:
                    dirty |= bit
                else:
                    dirty &= ~bit
                if not (new[p] > 0 or old[p] > 0):
                    live &= ~bit
            if g.matches:
                match_at.append(i)
                before.append(len(matched))
                matched += g.matches
        return matched

    def sample(self, t: float) -> None:
        alloc = self.view.state.allocated_gpu_milli / MILLI
        self._refresh(t)
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
        ready_gpu_s = self.pool_ready_gpu_s + (self.last - self._pool_mark) * self._pool_ready_gpus
        queued = np.array(self.queued_s)
        for j, since in self.queued_since.items():  # preempted and never started again
            queued[j] += end - since
        for j in range(jobs.size):
            if j not in self.first_wait:
                queued[j] = end - float(jobs.arrival[j])
        counted = np.ones(jobs.size, dtype=bool)
        counted[list(self.unhostable_jobs)] = False
        queued = queued[counted]
        done = np.array(sorted(self.finished_at), dtype=np.int64)
        slowdown = (
            np.maximum(
                (np.array([self.finished_at[j] for j in done.tolist()]) - jobs.arrival[done])
                / np.maximum(jobs.duration[done], SLOWDOWN_BOUND_S),
                1.0,
            )
            if len(done)
            else np.zeros(0)
        )
        pools = tuple(
            PoolResult(
                pool=pool.name,
                runs=int(self.pool_runs[p]),
                gpu_hours=float(self.pool_gpu_s[p]) / HOUR,
                utilisation_ready=float(self.pool_gpu_s[p] / ready_gpu_s[p]) if ready_gpu_s[p] else 0.0,
                ready_evictions=self.pool_timeouts[p],
            )
            for p, pool in enumerate(w.pools)
        )
        prices = [p.node_price_hour for p in w.pools]
        billed = [_billed_s(pool, s, end) for pool, s in zip(w.pools, self.node_s.tolist(), strict=True)]
        cost = (
            None
            if all(p is None for p in prices)
            else float(sum((p or 0.0) * s / HOUR for p, s in zip(prices, billed, strict=True)))
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
            blocked_idle_gpu_hours=float(np.sum(self.blocked)) / HOUR,
            blocked_policy_gpu_hours=self.blocked_policy / HOUR,
            blocked_fragmentation_gpu_hours=(float(np.sum(self.blocked)) - self.blocked_policy) / HOUR,
            queued_mean_s=float(queued.mean()) if len(queued) else 0.0,
            queued_p95_s=_pct(queued, 95),
            slowdown_mean=float(slowdown.mean()) if len(slowdown) else 0.0,
            utilisation_ready=self.alloc_gpu_s / self.ready_gpu_s if self.ready_gpu_s else 0.0,
            utilisation_max=self.alloc_gpu_s / (self.max_gpus * end) if end and self.max_gpus else 0.0,
            gpu_hours=float(self.run_gpu_s.sum()) / HOUR,
            preemptions=int(self.preempt_count.sum()),
            preempted_gpu_hours=float(self.preempt_gpu_s.sum()) / HOUR,
            ready_timeouts=sum(self.pool_timeouts),
            node_hours=float(self.node_s.sum()) / HOUR,
            cost=cost,
            teams=tuple(teams),
            pools=pools,
            preempted_by=tuple(
                QueuePreemptions(w.pools[p].name, w.queues[by].name, w.queues[of].name, n)
                for (p, by, of), n in sorted(self.preempted_by.items())
            ),
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
