"""The event loop of the dynamic simulation: Kueue admission, placement, the autoscaler, jobs finishing.

What each step models, and the upstream rule it follows:

- **Admission is by quota** (Kueue "Cluster Queue", quota and borrowing): a job is admitted to the first
  flavor (pool) of its queue's list where its units fit the queue's nominal quota; failing that (flavor
  fungibility `whenCanBorrow: TryNextFlavor`) the first where it fits by borrowing the cohort's unused quota,
  up to the queue's `borrowingLimit` and never taking what another queue keeps back below its `lendingLimit`.
  Admission does not look at nodes: an admitted job's pods then wait for room (placement, autoscaler).
- **Queueing** is `BestEffortFIFO` as Kueue's scheduler runs it (v0.19.2 pkg/scheduler/scheduler.go,
  pkg/cache/queue): each cycle takes the head of every queue (priority, then queueing time) and tries the
  heads that fit within their nominal quota before those that would borrow; a head that does not fit is
  skipped and the next of its queue may still go (`strict_fifo`, StrictFIFO: it blocks its queue). A head
  that did not fit waits, with every job of its queue of the same shape, until quota is released and then
  for the batched requeue, `Settings.requeue_batch_s` (Kueue's `requeueBatchPeriod`, 1 s).
- **Preemption** (the ClusterQueue's `preemption`): with `reclaimWithinCohort: Any`, a job that fits its own
  nominal quota takes it back from queues that borrow in that pool, lowest priority and most recently
  admitted first; with `withinClusterQueue: LowerPriority`, a job may evict lower-priority jobs of its own
  queue; with `borrowWithinCohort: LowerPriority` (`Settings.borrow_within_cohort_max_priority`), a job that
  would borrow may still take back lent quota from work of lower priority at most the threshold. Candidates
  are taken as Kueue orders them (v0.19.2 `preemption/common/ordering.go`): other queues'
  first, then lower priority, then the most recently admitted. A preempted job loses its run (the GPU-hours
  it had are counted as thrown away) and is requeued with its place in the queue kept: Kueue orders a
  preempted Workload by its creation time (v0.19.2 pkg/workload `Ordering.GetQueueOrderTimestamp`; only a
  `waitForPodsReady` timeout with `requeuingStrategy.timestamp: Eviction` sends a job to the back). Eviction
  is instant: the victims' quota is free for the preemptor in the same cycle (on a cluster their pods take
  their termination grace period first).
- **Gangs**: a job's pods are placed one by one as room appears; each placed pod holds its GPUs; the job runs
  when all run. With `waitForPodsReady`, a job whose pods are not all running within the timeout is evicted
  and requeued, freeing what its placed pods held (Kueue "Sequential admission with ready pods").
- **Placement**: each pod goes to the ready node of its admitted pool the placement policy scores highest
  (the same policies and scoring code as the placement replay, ``scheduler.sim.policies``).
- **Autoscaler**: with `autoscale`, a pool starts at `min_nodes`; pods that find no room make it add nodes
  (enough for the pending units, up to the pool's nodes), each Ready after the pool's provisioning delay; a
  node empty for `scale_down_unneeded_s` is removed while the pool is above `min_nodes`
  (cluster-autoscaler FAQ, "How does scale-down work?": unneeded for `--scale-down-unneeded-time`).

Deterministic: the only randomness is the policy's rng, seeded by `Settings.seed`; ties go by job index.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.model import MILLI
from scheduler.fgd.shapes import build_shapes, target_workload
from scheduler.fgd.state import ClusterState
from scheduler.sim.dynamic.model import World
from scheduler.sim.dynamic.report import Recorder, Result
from scheduler.sim.policies import Context, Policy, make_policy
from scheduler.sim.policies.base import score_nodes

ARRIVE, FINISH, NODE_READY, IDLE_CHECK, READY_TIMEOUT, REQUEUE = range(6)
WAITING, ADMITTED, RUNNING, DONE = range(4)
UNLIMITED = 10**12
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
        self.state = ClusterState(c)
        self.shapes = build_shapes(jobs.workload, c)
        frag = NodeFragmentation(
            self.state, target_workload(jobs.workload), self.shapes.node_model, sorted(set(c.gpu_model))
        )
        self.policy: Policy = make_policy(world.settings.policy, **world.settings.policy_params)
        rng = np.random.default_rng(world.settings.seed)
        self.policy.bind(Context(c, self.state, self.shapes, frag, rng, "policy", jobs.workload))
        self.frag = frag
        self.static = np.column_stack((c.cpu_milli, c.memory_mib, c.num_gpu, self.shapes.node_model))
        n_pools, n_queues = len(world.pools), len(world.queues)
        # Quota, in each pool's units.
        self.nominal = np.zeros((n_queues, n_pools), dtype=np.int64)
        self.borrow = np.zeros((n_queues, n_pools), dtype=np.int64)
        self.lend = np.zeros((n_queues, n_pools), dtype=np.int64)
        self.access = np.zeros((n_queues, n_pools), dtype=bool)
        self.flavors: list[list[int]] = []
        for q, queue in enumerate(world.queues):
            order = [self.pool_index[f] for f in queue.flavors if f in self.pool_index]
            self.flavors.append(order)
            for p in order:
                name = world.pools[p].name
                self.access[q, p] = True
                self.nominal[q, p] = queue.nominal.get(name, 0)
                b = queue.borrowing_limit.get(name)
                self.borrow[q, p] = UNLIMITED if b is None else b
                lend = queue.lending_limit.get(name)
                self.lend[q, p] = self.nominal[q, p] if lend is None else min(lend, self.nominal[q, p])
        self.capacity = np.array(
            [world.capacity_units(p) for p in world.pools],
            dtype=np.int64,
        )
        self.usage = np.zeros((n_queues, n_pools), dtype=np.int64)
        self.members = [np.array(p.nodes, dtype=np.int64) for p in world.pools]  # each pool's nodes
        self.gpus_per_node = [world.gpus_per_node(p) for p in world.pools]
        # Per job: units per pod in each pool (whole GPUs: num_gpu x units/GPU; a share: one unit).
        wl = jobs.workload
        share = (wl.gpu_milli > 0) & (wl.gpu_milli < MILLI)
        self.pod_units = np.where(share, 1, wl.num_gpu)  # x units_per_gpu for whole GPUs, below
        self.size = (jobs.pods * wl.num_gpu * wl.gpu_milli).tolist()  # orders jobs by what they ask
        self.allowed: list[list[int]] = [
            [self.pool_index[s] for s in spec.split("|") if s in self.pool_index] for spec in wl.gpu_spec
        ]
        self.jobs = [_Job(queued_at=float(t)) for t in jobs.arrival]
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = itertools.count()
        self.waiting: list[tuple[int, float, int]] = []  # sorted (-priority, queued_at, job)
        self.fresh: list[int] = []  # arrived (or requeued by a preemption) since the last cycle
        self.quota_freed = False  # every waiting job is tried again in the next cycle
        # Kueue's inadmissible workloads (v0.19.2 pkg/cache/queue): a head that did not fit waits, with every
        # job of its queue of the same shape (SchedulingEquivalenceHashing), until quota is released and the
        # batched requeue `requeue_batch_s` later moves them back to the heads
        self.parked: set[tuple[int, str, int, int, int, int]] = set()
        self.requeue_due = False
        wl = jobs.workload
        self.shape_of = list(
            zip(jobs.queue.tolist(), wl.gpu_spec, jobs.pods.tolist(), wl.num_gpu.tolist(),
                wl.gpu_milli.tolist(), jobs.priority.tolist(), strict=True)
        )  # fmt: skip
        self.pending: list[list[int]] = [[] for _ in world.pools]  # admitted jobs with pods to place, by pool
        self.admitted_in: list[set[int]] = [set() for _ in world.pools]  # admitted or running, by pool
        self.dirty_pools: set[int] = set()
        self.ready = np.zeros(c.size, dtype=bool)
        self.provisioning = np.zeros(c.size, dtype=bool)
        self.empty_since = np.full(c.size, -1.0)
        # Scores per pod shape, kept over the whole cluster and recomputed only for nodes that changed since (a
        # policy scores each node on its own state, as the placement replay's score matrix relies on too):
        # ``changed`` logs every node whose resources, policy state or readiness changed, each shape's cache
        # keeps its position in the log.
        self.changed: list[int] = []
        self.score_cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]] = {}
        self.ready_version = 0  # bumps whenever `ready` or `provisioning` changes
        self._ready_nodes: dict[int, tuple[int, np.ndarray]] = {}
        for pool in world.pools:
            up = pool.nodes if not world.settings.autoscale else pool.nodes[: pool.min_nodes]
            self.ready[list(up)] = True
            self.empty_since[list(up)] = 0.0
        self.unhostable = self._unhostable()
        self.recorder = Recorder(world, self)
        self.recorder.unhostable = len(self.unhostable)
        for j, t in enumerate(jobs.arrival.tolist()):
            if j not in self.unhostable:
                self._push(t, ARRIVE, j)
        if world.settings.autoscale:
            for n in np.flatnonzero(self.ready):
                self._schedule_idle_check(int(n), 0.0)

    def _unhostable(self) -> set[int]:
        """Drop from each job's pools those whose nodes cannot hold one of its pods even when empty; return the
        jobs left with none.

        Kueue assigns a flavor by quota alone, so it would admit such a job there and its pods would stay
        Pending for ever (evicted and readmitted at every waitForPodsReady timeout, the autoscaler adding
        nodes that cannot take them). Those pools are not offered; jobs no pool can host are left out and
        counted, as the placement replay counts pods no node can host."""
        c, wl = self.w.cluster, self.w.jobs.workload
        out = set()
        cache: dict[tuple[int, int, int, int], bool] = {}
        for j in range(wl.size):
            kept = []
            for p in self.allowed[j]:
                key = (p, int(wl.cpu_milli[j]), int(wl.memory_mib[j]), int(wl.num_gpu[j]))
                if key not in cache:
                    nodes = list(self.w.pools[p].nodes)
                    cache[key] = bool(
                        (
                            (c.cpu_milli[nodes] >= key[1])
                            & (c.memory_mib[nodes] >= key[2])
                            & (c.num_gpu[nodes] >= key[3])
                        ).any()
                    )
                if cache[key]:
                    kept.append(p)
            self.allowed[j] = kept
            if not any(p in kept for p in self.flavors[int(self.w.jobs.queue[j])]):
                out.add(j)
        return out

    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        heapq.heappush(self.events, (t, next(self.seq), kind, a, b))

    # ---- units ------------------------------------------------------------------------------------------

    def units(self, j: int, p: int) -> int:
        """Units job ``j`` takes in pool ``p``."""
        wl = self.w.jobs.workload
        per_pod = int(self.pod_units[j])
        if 0 < wl.gpu_milli[j] < MILLI:
            return per_pod * int(self.w.jobs.pods[j])
        return per_pod * self.w.pools[p].units_per_gpu * int(self.w.jobs.pods[j])

    # ---- the loop ---------------------------------------------------------------------------------------

    def run(self) -> Result:
        t = 0.0
        while self.events:
            t = self.events[0][0]
            self.recorder.advance(t)
            while self.events and self.events[0][0] == t:
                _, _, kind, a, b = heapq.heappop(self.events)
                self._handle(t, kind, a, b)
            self._admit(t)
            self._place(t)
            if self.w.settings.autoscale:
                self._scale_up(t)
            self.recorder.sample(t)
            self.after_cycle(t)
        return self.recorder.result(t)

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
                self.recorder.timed_out(a)
                self._evict(a, t, t)  # requeuingStrategy.timestamp Eviction: to the back of the queue
        elif kind == NODE_READY:
            if self.provisioning[a]:
                self.provisioning[a] = False
                self.ready[a] = True
                self._node_changed(a)
                self.empty_since[a] = t
                self.dirty_pools.add(int(self.node_pool[a]))
                self._schedule_idle_check(a, t)
        elif kind == IDLE_CHECK:
            self._idle_check(a, t)
        elif kind == REQUEUE:
            self.requeue_due = False
            self.parked.clear()
            self.quota_freed = True

    # ---- queueing and admission -------------------------------------------------------------------------

    def _enqueue(self, j: int, t: float, key: float | None = None) -> None:
        """Queue job ``j`` at time ``t``, ordered by ``key`` (its queueing timestamp; default ``t``)."""
        job = self.jobs[j]
        job.state, job.queued_at, job.pool = WAITING, t if key is None else key, -1
        bisect.insort(self.waiting, (-int(self.w.jobs.priority[j]), job.queued_at, j))
        self.recorder.waiting(j, +1)

    def _available(self, q: int, p: int) -> int:
        """Units queue ``q`` could still take in pool ``p``: its own limit and what the cohort can lend."""
        own = self.nominal[q, p] + self.borrow[q, p] - self.usage[q, p]
        kept = np.maximum(self.nominal[:, p] - self.lend[:, p] - self.usage[:, p], 0)
        kept[q] = 0
        cohort = self.capacity[p] - self.usage[:, p].sum() - kept.sum()
        return int(min(own, cohort))

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
        jobs, spec, size = self.w.jobs, self.w.jobs.workload.gpu_spec, self.size
        if self.quota_freed or strict:  # StrictFIFO always starts at the head (and stops at its first miss)
            candidates = [j for _, _, j in self.waiting]
        else:  # nothing freed: only jobs that arrived since could newly fit
            candidates = sorted(self.fresh, key=lambda j: (-int(jobs.priority[j]), self.jobs[j].queued_at, j))
        self.fresh.clear()
        self.quota_freed = False
        queues: dict[int, list[int]] = {}
        for j in reversed(candidates):  # each queue's candidates, its head last (popped first)
            queues.setdefault(int(jobs.queue[j]), []).append(j)
        # Within a cycle quota only tightens, so a job no smaller than one that failed with the same queue,
        # pools and priority fails too: skip it without trying (the scan stays linear in the queue).
        failed: dict[tuple[int, str, int], int] = {}
        parked = self.parked
        while queues:
            heads: list[tuple[bool, int, float, int]] = []
            for q in list(queues):
                rest = queues[q]
                while rest:
                    j = rest.pop()
                    if self.jobs[j].state != WAITING:
                        continue
                    key = (q, spec[j], int(jobs.priority[j]))
                    if (key in failed and size[j] >= failed[key]) or self.shape_of[j] in parked:
                        if strict:
                            rest.clear()
                        continue
                    heads.append((self._borrows(j, q), -int(jobs.priority[j]), self.jobs[j].queued_at, j))
                    break
                if not rest:
                    del queues[q]
            for _, _, _, j in sorted(heads):
                if self.jobs[j].state == WAITING and not self._try_admit(j, t):
                    q = int(jobs.queue[j])
                    key = (q, spec[j], int(jobs.priority[j]))
                    failed[key] = min(failed.get(key, size[j]), size[j])
                    if self.w.settings.requeue_batch_s > 0:
                        parked.add(self.shape_of[j])
                    if strict:
                        queues.pop(q, None)

    def _borrows(self, j: int, q: int) -> bool:
        """Whether job ``j`` would borrow: no pool of its queue's list has room for it in the nominal quota."""
        for p in self.flavors[q]:
            if p in self.allowed[j] and self.usage[q, p] + self.units(j, p) <= self.nominal[q, p]:
                return False
        return True

    def _try_admit(self, j: int, t: float) -> bool:
        q = int(self.w.jobs.queue[j])
        options = [p for p in self.flavors[q] if p in self.allowed[j]]
        # nominal first, then borrowing (flavorFungibility whenCanBorrow: TryNextFlavor)
        for p in options:
            need = self.units(j, p)
            if self.usage[q, p] + need <= self.nominal[q, p] and self._available(q, p) >= need:
                self._admit_to(j, q, p, need, t)
                return True
        for p in options:
            need = self.units(j, p)
            if self._available(q, p) >= need:
                self._admit_to(j, q, p, need, t)
                return True
        for p in options:
            if self._preempt_for(j, q, p, t):
                self._admit_to(j, q, p, self.units(j, p), t)
                return True
        return False

    def _preempt_for(self, j: int, q: int, p: int, t: float) -> bool:
        """Free room for ``j`` in pool ``p`` by preemption, if Kueue's rules allow enough victims.

        As Kueue's classical preemption (v0.19.2 pkg/scheduler/preemption/preemption.go classicalPreemptions,
        classical/hierarchical_preemption.go, classical/candidate_generator.go). Each candidate of another
        queue (one that borrows in the pool) is classified: if ``j`` fits within its own queue's nominal quota
        it reclaims with any priority (`InCohortReclamation`); otherwise, under `borrowWithinCohort:
        LowerPriority`, a candidate of lower priority than ``j`` and at most `maxPriorityThreshold` may be
        taken while ``j`` borrows (`InCohortReclaimWhileBorrowing`); any other may be taken only if ``j`` then
        fits within its nominal quota. The candidates, other queues' first, then lower priority, then the most
        recently admitted (common/ordering.go CandidatesOrdering), are taken one by one until ``j`` fits, a
        candidate of another queue only while that queue still borrows; first allowing ``j`` to borrow
        (skipping the candidates that forbid it), then, failing that, requiring it not to borrow; victims that
        turn out not to be needed are given back, the last taken first (fillBackWorkloads). Stacks with fair
        sharing get Kueue's fairPreemptions instead, which this does not model (docs/simulation.md)."""
        s, need = self.w.settings, self.units(j, p)
        prio = int(self.w.jobs.priority[j])
        if not s.reclaim_within_cohort and not s.preempt_lower_priority:
            return False
        queue, priority = self.w.jobs.queue, self.w.jobs.priority
        threshold = s.borrow_within_cohort_max_priority
        # hierarchical advantage: the request fits the queue's own quota (cache/scheduler QuantitiesFitInQuota)
        advantage = self.usage[q, p] + need <= self.nominal[q, p]
        reason: dict[int, str] = {}
        only_within_nominal: set[int] = (
            set()
        )  # ReclaimWithoutBorrowing: taken only if ``j`` then does not borrow
        for v in self.admitted_in[p]:
            qv, pv = int(queue[v]), int(priority[v])
            if qv == q:
                if s.preempt_lower_priority and pv < prio:
                    reason[v] = "InClusterQueue"
            elif s.reclaim_within_cohort and self.usage[qv, p] > self.nominal[qv, p]:
                if not advantage and threshold is not None and pv < prio and pv <= threshold:
                    reason[v] = "InCohortReclaimWhileBorrowing"
                else:
                    reason[v] = "InCohortReclamation"
                    if not advantage:
                        only_within_nominal.add(v)
        if not reason:
            return False
        order = sorted(
            reason, key=lambda v: (int(queue[v]) == q, int(priority[v]), -self.jobs[v].admitted_at, -v)
        )
        others = any(int(queue[v]) != q for v in order)
        # preemption.go: only its own queue's candidates, or the borrowWithinCohort attempts, borrowing first
        forbidden = threshold is None  # borrowWithinCohort: Never (Kueue's default)
        if not others or (forbidden and not self.usage[q, p] < self.nominal[q, p]):
            attempts = [True]
        elif forbidden and not advantage:
            attempts = [False, True]
        else:
            attempts = [True, False]

        def fits(u: np.ndarray, borrowing: bool) -> bool:
            if not borrowing and u[q] + need > self.nominal[q, p]:
                return False
            return self._fits_after(q, p, need, u)

        for borrowing in attempts:
            usage = self.usage[:, p].copy()
            victims: list[int] = []
            for v in order:
                qv = int(queue[v])
                if qv != q:
                    if borrowing and v in only_within_nominal:
                        continue
                    if usage[qv] <= self.nominal[qv, p]:  # candidateIsValid: that queue no longer borrows
                        continue
                victims.append(v)
                usage[qv] -= self.jobs[v].units
                if fits(usage, borrowing):
                    break
            else:
                continue
            for v in reversed(victims[:-1]):  # fill back what is not needed, the last taken stays
                back = usage.copy()
                back[int(queue[v])] += self.jobs[v].units
                if fits(back, borrowing):
                    victims.remove(v)
                    usage = back
            for v in victims:
                self.preempting(v, j, p, reason[v])
                self.recorder.preempted(v, t)
                self._evict(v, t, float(self.w.jobs.arrival[v]))  # its queueing timestamp: its creation
                self.fresh.append(v)  # back among the heads in the next cycle
            return True
        return False

    def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
        """Called before each preemption, with quota usage as it stands (tests check Kueue's rules here);
        ``reason`` as Kueue names it in the `Preempted` condition (InClusterQueue, InCohortReclamation,
        InCohortReclaimWhileBorrowing)."""

    def holding(self, job: int, t: float, units: int) -> None:
        """Called when a job's quota is reserved (``units`` > 0) or released (< 0): the replay on the twin
        compares the quota each side used and the quota preempted runs held."""

    def _fits_after(self, q: int, p: int, need: int, usage: np.ndarray) -> bool:
        own = self.nominal[q, p] + self.borrow[q, p] - usage[q]
        kept = np.maximum(self.nominal[:, p] - self.lend[:, p] - usage, 0)
        kept[q] = 0
        return bool(min(own, self.capacity[p] - usage.sum() - kept.sum()) >= need)

    def _admit_to(self, j: int, q: int, p: int, need: int, t: float) -> None:
        job = self.jobs[j]
        i = bisect.bisect_left(self.waiting, (-int(self.w.jobs.priority[j]), job.queued_at, j))
        del self.waiting[i]
        self.recorder.waiting(j, -1)
        job.state, job.pool, job.units, job.admitted_at = ADMITTED, p, need, t
        job.run += 1
        job.placed = []
        self.usage[q, p] += need
        self.holding(j, t, need)
        self.admitted_in[p].add(j)
        self.pending[p].append(j)
        self.dirty_pools.add(p)
        self.recorder.pending(j, +1)
        timeout = self.w.settings.pods_ready_timeout_s
        if timeout is not None:
            self._push(t + timeout, READY_TIMEOUT, j, job.run)

    def _evict(self, j: int, t: float, key: float) -> None:
        """Preemption or a waitForPodsReady timeout: free the pods and the quota, requeue the job at ``key``."""
        job = self.jobs[j]
        if job.state == ADMITTED:
            self.pending[job.pool].remove(j)
            self.recorder.pending(j, -1)
        self._release(j, t)
        self._enqueue(j, t, key)

    def _release(self, j: int, t: float) -> None:
        job = self.jobs[j]
        if job.state == RUNNING:
            self.recorder.stopped(j, t)
        q = int(self.w.jobs.queue[j])
        self.usage[q, job.pool] -= job.units
        self.holding(j, t, -job.units)
        self.admitted_in[job.pool].discard(j)
        s = int(self.shapes.pod_shape[j])
        cpu, mem = int(self.shapes.cpu[s]), int(self.shapes.mem[s])
        milli = int(self.shapes.gpu_milli[s])
        for node, gpus in job.placed:
            self.state.release(node, cpu, mem, gpus, milli)
            if self.policy.live_frag:
                self.frag.update(node)
            self.changed.append(node)
            if self.state.pods[node] == 0 and self.ready[node]:
                self.empty_since[node] = t
                self._schedule_idle_check(node, t)
        job.placed = []
        self.dirty_pools.add(job.pool)
        batch = self.w.settings.requeue_batch_s
        if batch <= 0:
            self.quota_freed = True
        elif not self.requeue_due:  # the first release fixes the batch's time (workqueue AddAfter)
            self.requeue_due = True
            self._push(t + batch, REQUEUE, 0)

    # ---- placement --------------------------------------------------------------------------------------

    def _place(self, t: float) -> None:
        for p in sorted(self.dirty_pools):
            still: list[int] = []
            nodes = self._ready_in(p)
            for j in self.pending[p]:
                if not self._place_job(j, nodes, t):
                    still.append(j)
            self.pending[p] = still
        self.dirty_pools.clear()

    def _place_job(self, j: int, nodes: np.ndarray, t: float) -> bool:
        job = self.jobs[j]
        s = int(self.shapes.pod_shape[j])
        cpu, mem = int(self.shapes.cpu[s]), int(self.shapes.mem[s])
        milli = int(self.shapes.gpu_milli[s])
        share = bool(self.shapes.is_share[s])
        while len(job.placed) < int(self.w.jobs.pods[j]) and len(nodes):
            score, gpu = self._scores(s, nodes, share)
            # the policies choose over the whole cluster's column (RoundRobin keeps its turn by node index)
            column = np.full(self.w.cluster.size, -1, dtype=np.int64)
            column[nodes] = score[nodes]
            node = self.policy.choose_node(column, s)
            if node < 0:
                break
            gpus = self.policy.choose_gpus(node, s, int(gpu[node]))
            self.state.allocate(node, cpu, mem, gpus, milli)
            self.policy.placed(node, s)
            if self.policy.live_frag:
                self.frag.update(node)
            self.changed.append(node)
            self.empty_since[node] = -1.0
            job.placed.append((node, gpus))
        if len(job.placed) < int(self.w.jobs.pods[j]):
            return False
        job.state, job.started_at = RUNNING, t
        if job.first_start is None:
            job.first_start = t
        self.recorder.pending(j, -1)
        self.recorder.started(j, t)
        self._push(t + float(self.w.jobs.duration[j]), FINISH, j, job.run)
        return True

    def _scores(self, s: int, nodes: np.ndarray, share: bool) -> tuple[np.ndarray, np.ndarray]:
        """Shape ``s``'s scores (-1: infeasible) and sharing GPU choices (0 where none), indexed by node, up to
        date on ``nodes``: only nodes never scored or changed since their last scoring are scored again."""
        size = self.w.cluster.size
        cache = self.score_cache.get(s)
        if cache is None:
            cache = (
                np.full(size, -1, dtype=np.int64),
                np.zeros(size, dtype=np.int64),
                np.ones(size, dtype=bool),
                [0],
            )
            self.score_cache[s] = cache
        score, gpu, stale, seen = cache
        if seen[0] < len(self.changed):
            stale[self.changed[seen[0] :]] = True
            seen[0] = len(self.changed)
        todo = nodes[stale[nodes]]
        if len(todo):
            got, share_gpu = score_nodes(self.policy, s, todo, self.static, share)
            score[todo] = got
            gpu[todo] = share_gpu if share_gpu is not None else 0
            stale[todo] = False
        return score, gpu

    def _ready_in(self, p: int) -> np.ndarray:
        """The Ready nodes of pool ``p``, in index order (recomputed only when readiness changed)."""
        hit = self._ready_nodes.get(p)
        if hit is None or hit[0] != self.ready_version:
            hit = (self.ready_version, np.flatnonzero(self.ready & (self.node_pool == p)))
            self._ready_nodes[p] = hit
        return hit[1]

    def _node_changed(self, node: int) -> None:
        """A node became Ready, provisioning or was removed: cached scores and ready lists are out of date."""
        self.changed.append(node)
        self.ready_version += 1

    # ---- the autoscaler ---------------------------------------------------------------------------------

    def _scale_up(self, t: float) -> None:
        for p, jobs in enumerate(self.pending):
            if not jobs:
                continue
            pool = self.w.pools[p]
            per_node = self.gpus_per_node[p] * pool.units_per_gpu
            if per_node == 0:
                continue
            want = 0
            for j in jobs:
                placed = len(self.jobs[j].placed)
                want += (
                    self.units(j, p) * (int(self.w.jobs.pods[j]) - placed) // max(int(self.w.jobs.pods[j]), 1)
                )
            members = self.members[p]
            coming = int(self.provisioning[members].sum())
            needed = -(-want // per_node) - coming
            if needed <= 0:
                continue
            free = members[~self.ready[members] & ~self.provisioning[members]][:needed]
            for n in free.tolist():
                self.provisioning[n] = True
                self._node_changed(n)
                self._push(t + pool.provision_s, NODE_READY, n)

    def _schedule_idle_check(self, node: int, t: float) -> None:
        if not self.w.settings.autoscale:  # a fixed cluster keeps its nodes
            return
        self._push(t + self.w.settings.scale_down_unneeded_s, IDLE_CHECK, node)

    def _idle_check(self, node: int, t: float) -> None:
        since = self.empty_since[node]
        if not self.ready[node] or since < 0 or t - since < self.w.settings.scale_down_unneeded_s:
            return
        p = int(self.node_pool[node])
        pool = self.w.pools[p]
        members = self.members[p]
        if int(self.ready[members].sum()) <= pool.min_nodes:
            return
        self.ready[node] = False
        self.empty_since[node] = -1.0
        self._node_changed(node)

    # ---- invariants (tests) -----------------------------------------------------------------------------

    def _check(self) -> None:
        self.state.check()
        if (self.usage < 0).any():
            raise AssertionError("negative quota usage")
        for p in range(len(self.w.pools)):
            if self.usage[:, p].sum() > self.capacity[p]:
                raise AssertionError(f"pool {self.w.pools[p].name}: admitted beyond its capacity")
        if (self.usage > self.nominal + self.borrow).any():
            raise AssertionError("a queue is beyond its nominal quota plus borrowing limit")
        held = self.state.alloc_gpu.sum(axis=1)
        if (held[~self.ready] > 0).any():
            raise AssertionError("GPUs allocated on a node that is not ready")


def simulate(world: World, check: bool = False) -> Result:
    """Run ``world`` to the end (every job finished, or no event left); ``check`` tests invariants per step."""
    return Simulation(world, check=check).run()
