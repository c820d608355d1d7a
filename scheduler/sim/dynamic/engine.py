"""The event loop of the dynamic simulation: Kueue admission, placement, the autoscaler, jobs finishing.

What each step models, and the upstream rule it follows:

- **Admission is by quota** (Kueue "Cluster Queue", quota and borrowing): a job is admitted to the first
  flavor (pool) of its queue's list where its units fit the queue's nominal quota; failing that (flavor
  fungibility `whenCanBorrow: TryNextFlavor`) the first where it fits by borrowing the cohort's unused quota,
  up to the queue's `borrowingLimit` and never taking what another queue keeps back below its `lendingLimit`.
  Admission does not look at nodes: an admitted job's pods then wait for room (placement, autoscaler). The
  quota arithmetic is :mod:`~scheduler.sim.dynamic.quota`'s.
- **Queueing** is `BestEffortFIFO` as Kueue's scheduler runs it (v0.19.2 pkg/scheduler/scheduler.go,
  pkg/cache/queue): each cycle takes the head of every queue (priority, then queueing time) and tries the
  heads that fit within their nominal quota before those that would borrow; a head that does not fit is
  skipped and the next of its queue may still go (`strict_fifo`, StrictFIFO: it blocks its queue). A head
  that did not fit waits, with every job of its queue of the same shape, until quota is released and then
  for the batched requeue, `Settings.requeue_batch_s` (Kueue's `requeueBatchPeriod`, 1 s).
- **Preemption** (the ClusterQueue's `preemption`: `reclaimWithinCohort`, `withinClusterQueue`,
  `borrowWithinCohort`): a job that fits no pool by quota may evict others to fit one; the victims are
  computed over the quota as it stands (:mod:`~scheduler.sim.dynamic.preemption`, with Kueue's candidate
  order and fill-back) and evicted here, their quota free for the preemptor in the same cycle.
- **Fair sharing** (`Settings.fair_sharing`, the stack's Kueue configuration has `fairSharing`): the heads are
  tried in the fair-sharing iterator's order, by dominant resource share over the team cohorts
  (:mod:`~scheduler.sim.dynamic.fair_sharing`), and victims are chosen by Kueue's `fairPreemptions`
  (:mod:`~scheduler.sim.dynamic.fair_preemption`) instead of classical preemption.
- **Gangs**: a job's pods are placed one by one as room appears; each placed pod holds its GPUs; the job runs
  when all run. With `waitForPodsReady`, a job whose pods are not all running within the timeout is evicted
  and requeued, freeing what its placed pods held (Kueue "Sequential admission with ready pods").
- **Placement**: each pod goes to the ready node of its admitted pool the placement policy scores highest
  (:mod:`~scheduler.sim.dynamic.placement`).
- **Autoscaler**: with `autoscale`, pools start at `min_nodes`, grow for pods that find no room and shrink
  when nodes stay empty, each pool by its own settings; a capacity block's nodes exist only inside its window
  (:mod:`~scheduler.sim.dynamic.autoscaler`).
- **ProvisioningRequests**: on a pool its ClusterQueue's admission check covers, a job that got quota keeps
  it and is admitted (its pods created) only when the autoscaler's loop answers its request Provisioned; a
  request answered `CapacityIsNotFound` is tried again after its back-off
  (:mod:`~scheduler.sim.dynamic.provisioning`, by :mod:`scheduler.provisioning`'s rules).

Beside this loop, as Kueue keeps its cache and preemption apart from its scheduling cycle (v0.19.2 pkg/cache,
pkg/scheduler/preemption, pkg/scheduler/scheduler.go): :mod:`~scheduler.sim.dynamic.quota` (quota and its use,
per queue and pool), :mod:`~scheduler.sim.dynamic.preemption` (victims computed, evicted here),
:mod:`~scheduler.sim.dynamic.placement`, :mod:`~scheduler.sim.dynamic.autoscaler`, and
:mod:`~scheduler.sim.dynamic.recorder` (what a run measures, returned as a :class:`Result`).

Deterministic: the only randomness is the policy's rng, seeded by `Settings.seed`; ties go by job index.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from scheduler.fgd.model import MILLI
from scheduler.fgd.state import ClusterState
from scheduler.provisioning import MAX_BACKOFF_S, answer, turn
from scheduler.sim.dynamic.admitted import Admitted
from scheduler.sim.dynamic.autoscaler import Autoscaler
from scheduler.sim.dynamic.candidates import ByShape, InOrder
from scheduler.sim.dynamic.fair_preemption import select_fair_victims
from scheduler.sim.dynamic.fair_sharing import Entry, Shares, Tree
from scheduler.sim.dynamic.model import World
from scheduler.sim.dynamic.pending import Pending
from scheduler.sim.dynamic.placement import Placement, unhostable
from scheduler.sim.dynamic.preemption import Victim, Workloads, select_victims
from scheduler.sim.dynamic.provisioning import PodAsk, Requests, Room, first_fit
from scheduler.sim.dynamic.quota import Quota
from scheduler.sim.dynamic.recorder import Recorder
from scheduler.sim.dynamic.report import Result

ARRIVE, FINISH, NODE_READY, IDLE_CHECK, READY_TIMEOUT, REQUEUE, CA_LOOP, WINDOW_OPEN, WINDOW_CLOSE = range(9)
# events that start something or change the nodes; the others (retries, timeouts) act on what these left
LIVE = frozenset({ARRIVE, FINISH, NODE_READY, IDLE_CHECK, WINDOW_OPEN, WINDOW_CLOSE})
# RESERVED: quota reserved, waiting for its ProvisioningRequest (Kueue's QuotaReserved, not yet Admitted)
WAITING, RESERVED, ADMITTED, RUNNING, DONE = range(5)
MAX_CYCLES = 20  # admission cycles at one instant


@dataclass
class _Job:
    """A job's live state."""

    queued_at: float  # when it (re)entered the queue: the FIFO key
    state: int = WAITING
    pool: int = -1
    units: int = 0
    admitted_at: float = 0.0
    started_at: float = 0.0
    first_start: float | None = None
    run: int = 0  # bumps on every admission, so stale FINISH/READY_TIMEOUT events are ignored
    placed: list[tuple[int, list[int]]] = field(default_factory=list)
    via_request: bool = False  # admitted through a ProvisioningRequest (its pods are not regular pods to CA)


class Simulation:
    """One run over a :class:`World`; :meth:`run` returns the :class:`Result`."""

    def __init__(self, world: World, check: bool = False) -> None:
        self.w = world
        self.check = check
        c, jobs = world.cluster, world.jobs
        self.pool_index = {p.name: i for i, p in enumerate(world.pools)}
        self.node_pool = np.full(c.size, -1, dtype=np.int64)
        for i, pool in enumerate(world.pools):
            self.node_pool[list(pool.nodes)] = i
        self.placement = Placement(world, self.node_pool)
        self.speed = [p.speed for p in world.pools]  # a job runs duration / speed in the pool
        self.quota = Quota.of(world, self.pool_index)
        self.shares = Shares(Tree.of(world), self.quota) if world.settings.fair_sharing else None
        # Per job: units per pod in each pool (whole GPUs: num_gpu x units/GPU; a share: one unit).
        wl = jobs.workload
        share = (wl.gpu_milli > 0) & (wl.gpu_milli < MILLI)
        self.pod_units = np.where(share, 1, wl.num_gpu)  # x units_per_gpu for whole GPUs, below
        self.size = (jobs.pods * wl.num_gpu * wl.gpu_milli).tolist()  # orders jobs by what they ask
        self.allowed: list[list[int]] = [
            [self.pool_index[s] for s in spec.split("|") if s in self.pool_index] for spec in wl.gpu_spec
        ]
        self.jobs = [_Job(queued_at=float(t)) for t in jobs.arrival]
        self.workloads = Workloads(jobs.queue, jobs.priority, self.jobs)
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = itertools.count()
        self.fresh: list[int] = []  # arrived (or requeued by a preemption) since the last cycle
        self.quota_freed = False  # every waiting job is tried again in the next cycle
        # Kueue's inadmissible workloads (v0.19.2 pkg/cache/queue): a head that did not fit waits, with every
        # job of its queue of the same shape (SchedulingEquivalenceHashing), until quota is released and the
        # batched requeue `requeue_batch_s` later moves them back to the heads
        self.parked: set[int] = set()  # shapes (``shape_of``)
        self.requeue_due = False
        # The shapes Kueue holds as inadmissible until the batched requeue: those of jobs that failed, and those
        # skipped because a job of the same queue, pools and priority no larger failed in the same cycle (Kueue
        # pops each as its queue's head in a later cycle and finds it inadmissible in turn).
        self.inadmissible: set[int] = set()
        self.queue_of: list[int] = jobs.queue.tolist()
        self.priority_of: list[int] = jobs.priority.tolist()
        # per job, as small numbers (hashed at every visit of a cycle): its shape as Kueue's equivalence
        # hashing sees it (queue, pools, pods, GPUs, share, priority), and its (queue, pools, priority)
        shapes: dict[tuple[int, str, int, int, int, int], int] = {}
        self.shape_of: list[int] = [
            shapes.setdefault(key, len(shapes))
            for key in zip(self.queue_of, wl.gpu_spec, jobs.pods.tolist(), wl.num_gpu.tolist(),
                           wl.gpu_milli.tolist(), self.priority_of, strict=True)
        ]  # fmt: skip
        kinds: dict[tuple[int, str, int], int] = {}
        self.kind_of: list[int] = [
            kinds.setdefault(key, len(kinds))
            for key in zip(self.queue_of, wl.gpu_spec, self.priority_of, strict=True)
        ]
        # the waiting jobs of each queue, sorted (-priority, queued_at, job), and the same by shape
        self.waiting_in: list[list[tuple[int, float, int]]] = [[] for _ in world.queues]
        self.waiting_by_shape: list[dict[int, list[tuple[int, float, int]]]] = [{} for _ in world.queues]
        # units per pod x pods, and whether that is the count in every pool (a share) or x the pool's units per GPU
        self._units_base: list[int] = (self.pod_units * jobs.pods).tolist()
        self._pods: list[int] = jobs.pods.tolist()
        self._units_flat: list[bool] = share.tolist()
        self._units_per_gpu = [p.units_per_gpu for p in world.pools]
        self.pending = [Pending() for _ in world.pools]  # admitted jobs with pods to place, by pool
        self.admitted_in: list[set[int]] = [set() for _ in world.pools]  # admitted or running, by pool
        self.by_group = [Admitted() for _ in world.pools]  # the same, as classical preemption reads them
        self.dirty_pools: set[int] = set()
        # Room in a pool grows only when pods leave it or a node turns Ready there: ``room[p]`` counts those
        # events, and ``full[p][shape]`` is the count at which a pod of that shape last found no node in p
        # with room for it. Until the count moves, such a pod finds none again (every node's room only
        # shrank), so its jobs are not tried.
        self.room = [0] * len(world.pools)
        self.full: list[dict[int, int]] = [{} for _ in world.pools]
        self.pod_shape = self.placement.shapes.pod_shape.tolist()
        self.autoscaler = Autoscaler(world, self.node_pool, self.placement.changed)
        self.checked = [{self.pool_index[n] for n in q.checked if n in self.pool_index} for q in world.queues]
        self.requests = Requests()
        self.ca_loop_due = False
        self.live = 0  # LIVE events in the queue
        self.last_live = 0.0  # when the last one was handled
        self.window_closed = False
        self.unhostable = unhostable(world, self.allowed, self.flavors)
        self.recorder = Recorder(world, self, self.allowed, self.flavors)
        self.recorder.unhostable_jobs = self.unhostable
        for j, t in enumerate(jobs.arrival.tolist()):
            if j not in self.unhostable:
                self._push(t, ARRIVE, j)
        if world.settings.autoscale:
            for n in np.flatnonzero(self.ready):
                self._schedule_idle_check(int(n), 0.0)
        for p, pool in enumerate(world.pools):
            if pool.window is not None:
                self._push(pool.window[0], WINDOW_OPEN, p)
                if pool.window[1] != float("inf"):
                    self._push(pool.window[1], WINDOW_CLOSE, p)

    # ---- what the recorder (a RunView) and tests read ---------------------------------------------------

    @property
    def state(self) -> ClusterState:
        return self.placement.state

    @property
    def ready(self) -> np.ndarray:
        return self.autoscaler.ready

    @property
    def provisioning(self) -> np.ndarray:
        return self.autoscaler.provisioning

    @property
    def ready_version(self) -> int:
        return self.autoscaler.ready_version

    @property
    def alloc_version(self) -> int:
        return len(self.placement.changed)

    @property
    def changed(self) -> list[int]:
        return self.placement.changed

    @property
    def usage(self) -> np.ndarray:
        return self.quota.usage

    @property
    def nominal(self) -> np.ndarray:
        return self.quota.nominal

    @property
    def flavors(self) -> list[list[int]]:
        return self.quota.flavors

    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.live += kind in LIVE
        heapq.heappush(self.events, (t, next(self.seq), kind, a, b))

    # ---- units ------------------------------------------------------------------------------------------

    def units(self, j: int, p: int) -> int:
        """Units job ``j`` takes in pool ``p``."""
        if self._units_flat[j]:
            return self._units_base[j]
        return self._units_base[j] * self._units_per_gpu[p]

    def _needs(self, j: int, q: int) -> Iterator[tuple[int, int]]:
        """Job ``j``'s pools among its queue's flavors, in their order, with the units it takes in each (computed
        as they are asked for)."""
        allowed = self.allowed[j]
        return ((p, self.units(j, p)) for p in self.quota.flavors[q] if p in allowed)

    # ---- the loop ---------------------------------------------------------------------------------------

    def run(self) -> Result:
        t = 0.0
        while self.events:
            if self.window_closed and not self.live and self.events[0][0] - self.last_live > self._quiet_s():
                break  # a capacity block ended and only retries went on for a whole retry cycle: no job can start
            t = self.events[0][0]
            self.recorder.advance(t)
            while self.events and self.events[0][0] == t:
                _, _, kind, a, b = heapq.heappop(self.events)
                if kind in LIVE:
                    self.live -= 1
                    self.last_live = t
                self._handle(t, kind, a, b)
            self._admit(t)
            self._place(t)
            if self.w.settings.autoscale:
                self._scale_up(t)
            self.recorder.sample(t)
            self.after_cycle(t)
        return self.recorder.result(t)

    def _quiet_s(self) -> float:
        """How long retries alone (timeouts, requeues, the autoscaler's loops) may go on before the run ends once
        a capacity block has closed: long enough for any of them to have started a job that could start (it
        would then have queued a job's end or a node's boot)."""
        st = self.w.settings
        timeout = st.pods_ready_timeout_s or 0.0
        return 2 * timeout + MAX_BACKOFF_S + 2 * st.scan_interval_s + st.requeue_batch_s

    def after_cycle(self, t: float) -> None:
        """Called once the events of time ``t`` are handled; checks the invariants when asked to."""
        if self.check:
            self._check()

    def _handle(self, t: float, kind: int, a: int, b: int) -> None:
        if kind == ARRIVE:
            self._enqueue(a, t)
            self.fresh.append(a)
        elif kind == FINISH:
            job = self.jobs[a]
            if job.state == RUNNING and job.run == b:
                self._release(a, t)
                job.state = DONE
                self.recorder.finished(a, t)
        elif kind == READY_TIMEOUT:
            job = self.jobs[a]
            if job.state == ADMITTED and job.run == b:
                self.recorder.timed_out(a, job.pool)
                self._evict(a, t, t)  # requeuingStrategy.timestamp Eviction: to the back of the queue
        elif kind == NODE_READY:
            if self.autoscaler.node_ready(a, t):
                self.dirty_pools.add(int(self.node_pool[a]))
                self.room[int(self.node_pool[a])] += 1
                self._schedule_idle_check(a, t)
        elif kind == IDLE_CHECK:
            again = self.autoscaler.idle_check(a, t)
            if again is not None:
                self._push(again, IDLE_CHECK, a)
        elif kind == CA_LOOP:
            self.ca_loop_due = False
            self._ca_loop(t)
        elif kind == WINDOW_OPEN:
            self.dirty_pools.add(a)
        elif kind == WINDOW_CLOSE:
            self._close_window(a, t)
        elif kind == REQUEUE:
            self.requeue_due = False
            self.parked.clear()
            self.inadmissible.clear()
            self.quota_freed = True

    # ---- queueing and admission -------------------------------------------------------------------------

    def _enqueue(self, j: int, t: float, key: float | None = None) -> None:
        """Queue job ``j`` at time ``t``, ordered by ``key`` (its queueing timestamp; default ``t``)."""
        job = self.jobs[j]
        job.state, job.queued_at, job.pool = WAITING, t if key is None else key, -1
        entry = (-self.priority_of[j], job.queued_at, j)
        q = self.queue_of[j]
        bisect.insort(self.waiting_in[q], entry)
        bisect.insort(self.waiting_by_shape[q].setdefault(self.shape_of[j], []), entry)
        self.recorder.waiting(j, +1)

    def _admit(self, t: float) -> None:
        """Admission cycles at time ``t``: a preemption requeues its victims, which Kueue tries again in the next
        cycle (at once), so cycles repeat while they evict (bounded, against a preemption ping-pong)."""
        for _ in range(MAX_CYCLES):
            self._cycle(t)
            if not self.quota_freed:
                return

    def _cycle(self, t: float) -> None:
        """One instant's admission pass, as Kueue's scheduling cycles run it (v0.19.2 pkg/scheduler/scheduler.go):
        each cycle takes the head of every ClusterQueue, tries the heads that fit within their queue's nominal
        quota before those that would borrow, then by priority and queueing time (`entryOrdering`), and a head
        that does not fit leaves room for the next one of its queue in the next cycle (BestEffortFIFO; under
        StrictFIFO it blocks its queue)."""
        strict = self.w.settings.strict_fifo
        size, queue_of, kind_of, shape_of = self.size, self.queue_of, self.kind_of, self.shape_of
        jobs, priority = self.jobs, self.priority_of
        # Within a cycle quota only tightens, so a job no smaller than one that failed with the same queue,
        # pools and priority (``kind_of``) fails too: skip it without trying, as a job whose shape is parked.
        # Both depend on the job's shape alone (candidates.py).
        failed: dict[int, int] = {}
        parked, inadmissible = self.parked, self.inadmissible

        def skip(j: int) -> bool:
            kind, shape = kind_of[j], shape_of[j]
            if (kind in failed and size[j] >= failed[kind]) or shape in parked:
                inadmissible.add(shape)
                return True
            return False

        def waits(j: int) -> bool:
            return jobs[j].state == WAITING

        # each queue's candidates, the queues in the order of their last candidate
        queues: dict[int, InOrder | ByShape] = {}
        if self.quota_freed or strict:  # StrictFIFO always starts at the head (and stops at its first miss)
            waiting_in = self.waiting_in
            for q in sorted((q for q, mine in enumerate(waiting_in) if mine), key=lambda q: waiting_in[q][-1],
                            reverse=True):  # fmt: skip
                queues[q] = self._candidates(q, strict)
        else:  # nothing freed: only jobs that arrived since could newly fit
            fresh: dict[int, list[int]] = {}  # each queue's, last first
            for j in sorted(self.fresh, key=lambda j: (-priority[j], jobs[j].queued_at, j), reverse=True):
                fresh.setdefault(queue_of[j], []).append(j)
            queues = {q: InOrder(mine[::-1], strict) for q, mine in fresh.items()}
        self.fresh.clear()
        self.quota_freed = False
        while queues:
            heads: list[tuple[bool, int, float, int]] = []
            for q in list(queues):
                candidates = queues[q]
                j = candidates.head(waits, skip)
                if j >= 0:
                    heads.append(
                        (self.quota.would_borrow(q, self._needs(j, q)), -priority[j], jobs[j].queued_at, j)
                    )
                if not candidates:
                    del queues[q]
            for j in self._ordered(heads):
                if jobs[j].state == WAITING and not self._try_admit(j, t):
                    kind = kind_of[j]
                    failed[kind] = min(failed.get(kind, size[j]), size[j])
                    inadmissible.add(shape_of[j])
                    if self.w.settings.requeue_batch_s > 0:
                        parked.add(shape_of[j])
                    if strict:
                        queues.pop(queue_of[j], None)

    def _candidates(self, q: int, strict: bool) -> InOrder | ByShape:
        """Queue ``q``'s candidates when every waiting job is tried again: StrictFIFO stops at its first miss, so
        it walks its whole list; BestEffortFIFO merges its shapes' lists, passing over the skipped shapes."""
        if strict:
            return InOrder([j for _, _, j in self.waiting_in[q]], strict)
        return ByShape(self.waiting_by_shape[q], self.parked)

    def _ordered(self, heads: list[tuple[bool, int, float, int]]) -> Iterator[int]:
        """The cycle's heads in the order Kueue tries them: classical (`makeClassicalIterator`: not borrowing
        first, priority, queue time), or with fair sharing the tournament by dominant resource share, rerun
        before each pop so every admission counts (:meth:`Shares.next_entry`)."""
        if self.shares is None:
            for _, _, _, j in sorted(heads):
                yield j
            return
        jobs = self.w.jobs
        entries = []
        for _, _, queued_at, j in heads:
            q = int(jobs.queue[j])
            p, need = self._nominate(j, q)
            entries.append(Entry(j, q, p, need, int(jobs.priority[j]), queued_at))
        while entries:
            e = self.shares.next_entry(entries)
            entries.remove(e)
            yield e.job

    def _nominate(self, j: int, q: int) -> tuple[int, int]:
        """The pool and units of job ``j``'s assignment as nominated (the first flavor where it fits within the
        nominal quota, else by borrowing, else the first it may preempt in), which its share is computed with."""
        needs = list(self._needs(j, q))
        quota = self.quota
        for p, need in needs:
            if quota.within_nominal(q, p, need) and quota.available(q, p) >= need:
                return p, need
        for p, need in needs:
            if quota.available(q, p) >= need:
                return p, need
        return needs[0]

    def _try_admit(self, j: int, t: float) -> bool:
        q = self.queue_of[j]
        quota = self.quota
        options = [p for p in quota.flavors[q] if p in self.allowed[j]]
        # nominal first, then borrowing (flavorFungibility whenCanBorrow: TryNextFlavor)
        for p in options:
            need = self.units(j, p)
            if quota.within_nominal(q, p, need) and quota.available(q, p) >= need:
                self._admit_to(j, q, p, need, t)
                return True
        for p in options:
            need = self.units(j, p)
            if quota.available(q, p) >= need:
                self._admit_to(j, q, p, need, t)
                return True
        for p in options:
            need = self.units(j, p)
            victims = self._victims(j, p, need)
            if victims:
                self._preempt(j, p, victims, t)
                self._admit_to(j, q, p, need, t)
                return True
        return False

    def _victims(self, j: int, p: int, need: int) -> list[Victim]:
        """Whom job ``j`` would evict to fit ``need`` units in pool ``p`` (empty: it cannot)."""
        if self.shares is not None:
            return select_fair_victims(
                self.shares, self.w.settings, self.workloads, j, p, need, self.admitted_in[p]
            )
        return select_victims(self.quota, self.w.settings, self.workloads, j, p, need, self.by_group[p])

    def _preempt(self, j: int, p: int, victims: list[Victim], t: float) -> None:
        """Evict ``victims`` (from :func:`~scheduler.sim.dynamic.preemption.select_victims`) for job ``j`` in
        pool ``p``, as Kueue issues the preemptions it computed (v0.19.2 preemption.go IssuePreemptions); each
        is requeued at its creation time and is back among the heads in the next cycle. Each is counted by
        pool and the two queues (the report names queues that evict each other both ways)."""
        queue = self.w.jobs.queue
        by = int(queue[j])
        counts = self.recorder.preempted_by
        for v, reason in victims:
            self.preempting(v, j, p, reason)
            self.recorder.preempted(v, t)
            key = (p, by, int(queue[v]))
            counts[key] = counts.get(key, 0) + 1
            self._evict(v, t, float(self.w.jobs.arrival[v]))  # its queueing timestamp: its creation
            self.fresh.append(v)  # back among the heads in the next cycle

    def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
        """Called before each preemption, with quota usage as it stands (tests check Kueue's rules here);
        ``reason`` as Kueue names it in the `Preempted` condition (InClusterQueue, InCohortReclamation,
        InCohortReclaimWhileBorrowing)."""

    def holding(self, job: int, t: float, units: int) -> None:
        """Called when a job's quota is reserved (``units`` > 0) or released (< 0): the replay on the twin
        compares the quota each side used and the quota preempted runs held."""

    def _admit_to(self, j: int, q: int, p: int, need: int, t: float) -> None:
        job = self.jobs[j]
        entry = (-self.priority_of[j], job.queued_at, j)
        mine = self.waiting_in[q]
        del mine[bisect.bisect_left(mine, entry)]
        same = self.waiting_by_shape[q][self.shape_of[j]]
        del same[bisect.bisect_left(same, entry)]
        self.recorder.waiting(j, -1)
        job.state, job.pool, job.units, job.admitted_at = ADMITTED, p, need, t
        job.run += 1
        job.placed = []
        self.quota.admit(q, p, need)
        self.holding(j, t, need)
        self.admitted_in[p].add(j)
        self.by_group[p].add(j, q, self.priority_of[j], t)
        self.recorder.pending(j, +1, p)
        job.via_request = p in self.checked[q]
        if job.via_request:  # Kueue creates the request; the autoscaler's next loop sees it
            job.state = RESERVED
            self.requests.create(j)
            self._schedule_ca_loop(t)
        else:
            self._admitted(j, t)

    def _admitted(self, j: int, t: float) -> None:
        """Job ``j`` is admitted on its reserved quota: its pods are created and wait to be placed."""
        job = self.jobs[j]
        job.state = ADMITTED
        self.pending[job.pool].add(j, self.pod_shape[j], self._asked(j))
        self.dirty_pools.add(job.pool)
        timeout = self.w.settings.pods_ready_timeout_s
        if timeout is not None:
            self._push(t + timeout, READY_TIMEOUT, j, job.run)

    def _evict(self, j: int, t: float, key: float) -> None:
        """Preemption or a waitForPodsReady timeout: free the pods and the quota, requeue the job at ``key``."""
        job = self.jobs[j]
        if job.state == ADMITTED:
            self.pending[job.pool].remove(j, self.pod_shape[j])
            self.recorder.pending(j, -1, job.pool)
        elif job.state == RESERVED:  # Kueue deletes the job's ProvisioningRequest
            self.requests.drop(j)
            self.recorder.pending(j, -1, job.pool)
        self._release(j, t)
        self._enqueue(j, t, key)

    def _release(self, j: int, t: float) -> None:
        job = self.jobs[j]
        if job.state == RUNNING:
            self.recorder.stopped(j, t)
        q = self.queue_of[j]
        self.quota.release(q, job.pool, job.units)
        self.holding(j, t, -job.units)
        self.admitted_in[job.pool].discard(j)
        self.by_group[job.pool].remove(j, q, self.priority_of[j], job.admitted_at)
        for node in self.placement.release(j, job.placed):
            if self.autoscaler.emptied(node, t):
                self._schedule_idle_check(node, t)
        job.placed = []
        self.dirty_pools.add(job.pool)
        self.room[job.pool] += 1
        batch = self.w.settings.requeue_batch_s
        if batch <= 0:
            self.quota_freed = True
        elif not self.requeue_due:  # the first release fixes the batch's time (workqueue AddAfter)
            self.requeue_due = True
            self._push(t + batch, REQUEUE, 0)

    # ---- placement and the autoscaler -------------------------------------------------------------------

    def _place(self, t: float) -> None:
        for p in sorted(self.dirty_pools):
            self._place_in(p, t)
        self.dirty_pools.clear()

    def _place_in(self, p: int, t: float) -> None:
        """Try pool ``p``'s pending jobs in order, passing over the pod shapes that found no room while the pool's
        room has not grown since (by shape, without visiting their jobs)."""
        nodes = self.autoscaler.ready_in(p)
        room, full, pending = self.room[p], self.full[p], self.pending[p]
        ran = [j for j in pending.open_jobs(lambda s: full.get(s) != room) if self._place_job(j, nodes, t)]
        for j in ran:
            pending.remove(j, self.pod_shape[j])

    def _place_job(self, j: int, nodes: np.ndarray, t: float) -> bool:
        job = self.jobs[j]
        pods = self._pods[j]
        before = len(job.placed)
        no_room = self.placement.place(j, job.placed, job.pool, nodes)
        for node, _ in job.placed[before:]:
            self.autoscaler.busy(node)
        if len(job.placed) < pods:
            if len(job.placed) > before:
                self.pending[job.pool].ask(j, self._asked(j))
            if no_room:
                self.full[job.pool][self.pod_shape[j]] = self.room[job.pool]
            return False
        job.state, job.started_at = RUNNING, t
        if job.first_start is None:
            job.first_start = t
        self.recorder.pending(j, -1, job.pool)
        self.recorder.started(j, t, job.pool)
        self._push(t + float(self.w.jobs.duration[j]) / self.speed[job.pool], FINISH, j, job.run)
        return True

    def _asked(self, j: int) -> int:
        """The units in its pool that admitted job ``j``'s pods not yet placed ask (what scale-up provisions for)."""
        job = self.jobs[j]
        pods = self._pods[j]
        return self.units(j, job.pool) * (pods - len(job.placed)) // max(pods, 1)

    def _scale_up(self, t: float) -> None:
        for p, jobs in enumerate(self.pending):
            if jobs:
                self._provision(p, self.autoscaler.scale_up(p, jobs.asked, t), t)

    def _provision(self, p: int, nodes: list[int], t: float) -> None:
        delay = self.w.pools[p].provision_s
        for n in nodes:
            self._push(t + delay, NODE_READY, n)

    def _schedule_idle_check(self, node: int, t: float) -> None:
        if not self.w.settings.autoscale:  # a fixed cluster keeps its nodes
            return
        pool = self.w.pools[int(self.node_pool[node])]
        after = self.w.unneeded_s(pool)
        if pool.window is None and after != float("inf"):  # a block's nodes go when its window ends
            self._push(t + after, IDLE_CHECK, node)

    def _close_window(self, p: int, t: float) -> None:
        """A capacity block ends: its nodes go, and the jobs with pods on them are evicted and queue again."""
        self.window_closed = True
        gone = set(self.autoscaler.members[p].tolist())
        hit = [j for j in sorted(self.admitted_in[p]) if any(n in gone for n, _ in self.jobs[j].placed)]
        for j in hit:
            self.recorder.preempted(j, t)
            self._evict(j, t, t)
        for n in gone:
            if self.ready[n] or self.provisioning[n]:
                self.autoscaler.remove(n)
        self.dirty_pools.add(p)

    # ---- ProvisioningRequests ---------------------------------------------------------------------------

    def _schedule_ca_loop(self, t: float) -> None:
        """The autoscaler's next loop after ``t`` (its loops run every scan interval from the start)."""
        if self.ca_loop_due:
            return
        every = self.w.settings.scan_interval_s
        self.ca_loop_due = True
        self._push((t // every + 1) * every, CA_LOOP, 0)

    def _ca_loop(self, t: float) -> None:
        """One loop of the autoscaler, as far as requests go: the first request it may try, served when the
        wrapper orchestrator's turn is the requests' (regular pods that found no room take the other turns)."""
        j = self.requests.next(t)
        regular = any(not self.jobs[i].via_request for jobs in self.pending for i in jobs)
        serve, self.requests.request_mode = turn(self.requests.request_mode, j is not None, regular)
        if serve and j is not None:
            self._answer(j, t)
        if self.requests.open:
            self._schedule_ca_loop(t)

    def _answer(self, j: int, t: float) -> None:
        """The autoscaler answers job ``j``'s request (all its pods or none): Provisioned, the job is admitted
        (its pods wait for any nodes being added); not found, it is tried again after the back-off."""
        p = self.jobs[j].pool
        rooms = self._rooms(p)
        first_fit(itertools.chain.from_iterable(self._asks(i) for i in self.pending[p]), rooms)
        asks = self._asks(j)
        added: list[int] = []

        def scale_up() -> bool:
            left = first_fit(asks, rooms)
            if left and not self.autoscaler.can_add(p, t):
                return False
            cap = self.state.gpu_cap
            c = self.w.cluster
            for n in self.autoscaler.absent(p).tolist():
                if not left:
                    break
                room: Room = ([int(c.cpu_milli[n]), int(c.memory_mib[n])], cap[n].tolist())
                left = first_fit(left, [room])
                added.append(n)
            return not left

        verdict = answer(not first_fit(asks, [(list(a), list(g)) for a, g in rooms]), scale_up)
        if not verdict.provisioned:
            self.requests.not_found(j, t)
            return
        self._provision(p, self.autoscaler.add(p, len(added), t), t)
        self.requests.drop(j)
        self._admitted(j, t)

    def _rooms(self, p: int) -> list[Room]:
        """Pool ``p`` as the autoscaler's snapshot holds it: each Ready node's free room, each coming node whole."""
        s, c, a = self.state, self.w.cluster, self.autoscaler
        rooms: list[Room] = []
        for n in a.members[p].tolist():
            if a.ready[n]:
                rooms.append(([int(s.free_cpu[n]), int(s.free_mem[n])], s.free_gpu[n].tolist()))
            elif a.provisioning[n]:
                rooms.append(([int(c.cpu_milli[n]), int(c.memory_mib[n])], s.gpu_cap[n].tolist()))
        return rooms

    def _asks(self, j: int) -> list[PodAsk]:
        """What each of job ``j``'s pods not yet placed asks for."""
        wl = self.w.jobs.workload
        ask = (int(wl.cpu_milli[j]), int(wl.memory_mib[j]), int(wl.num_gpu[j]), int(wl.gpu_milli[j]))
        return [ask] * (self._pods[j] - len(self.jobs[j].placed))

    # ---- invariants (tests) -----------------------------------------------------------------------------

    def _check(self) -> None:
        self.state.check()
        self.quota.check([p.name for p in self.w.pools])
        held = self.state.alloc_gpu.sum(axis=1)
        if (held[~self.ready] > 0).any():
            raise AssertionError("GPUs allocated on a node that is not ready")


def simulate(world: World, check: bool = False) -> Result:
    """Run ``world`` to the end (every job finished, or no event left); ``check`` tests invariants per step."""
    return Simulation(world, check=check).run()
