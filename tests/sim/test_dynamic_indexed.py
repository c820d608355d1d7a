"""The engine's indexes change its speed, not its answers: on small loaded runs (queues that form, borrowing,
preemption, gangs that time out) every admission, every preemption and the whole Result equal those of the
same engine with the straightforward scans the indexes replace:

- victims chosen by classifying and sorting every admitted job of the pool (Kueue's classical preemption as
  written in v0.19.2 `preemption.go` / `common/ordering.go`), not by the per-(queue, priority) index;
- placement that tries every pending job of a pool again at every instant, in order, not only after room grew
  nor through the pending jobs kept by pod shape, and chooses each pod's node over a whole-cluster column, not
  from the (pod shape, pool) heap;
- blocked-while-idle that sums each pool's idle GPUs over its Ready nodes afresh, sorts the demand groups, walks
  every group and asks every "could a node run it" of the pool's Ready nodes afresh at every step, not
  reusing the last step's matches, the running sums of idle GPUs, nor the last walk's matches of the groups
  whose demand and pools' idle GPUs are as they were.

- placement that asks the (pod shape, pool) heap for every pod, not first the pool's ceiling (the most whole
  GPUs free on one node and the most free of one GPU), which turns away a pod no node of the pool can take.

The pending jobs kept by pod shape are also checked against a scan of every job in order, as jobs join and
leave and shapes close; blocked-while-idle's idle GPUs and walk against the fresh sums and a walk of every
group at every step. The heap's every answer is also checked against the argmax of freshly computed scores
over the pool, each ceiling's answer against the counts taken afresh, each fit tested node by node in Python against numpy's test over the nodes, and each quota
answer in Python against the arithmetic over the quota's arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.dynamic_simulation import Traced
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.fgd.state import ClusterState
from scheduler.sim.dynamic import Jobs, Pool, Queue, Settings, World
from scheduler.sim.dynamic.candidates import ByShape, InOrder
from scheduler.sim.dynamic.pending import Pending
from scheduler.sim.dynamic.preemption import Victim, Workloads, candidates_ordering
from scheduler.sim.dynamic.quota import Quota
from scheduler.sim.dynamic.recorder import Recorder
from scheduler.sim.policies.base import feasible, score_nodes


def scanned_victims(
    quota: Quota, settings: Settings, workloads: Workloads, j: int, p: int, need: int, candidates: set[int]
) -> list[Victim]:
    """Classical preemption by the definition: classify every admitted job, order them all, take one by one."""
    s = settings
    if not s.reclaim_within_cohort and not s.preempt_lower_priority:
        return []
    queue, priority, held = workloads.queue, workloads.priority, workloads.held
    q, prio = int(queue[j]), int(priority[j])
    threshold = s.borrow_within_cohort_max_priority
    usage, nominal = quota.usage, quota.nominal
    advantage = usage[q, p] + need <= nominal[q, p]
    reason: dict[int, str] = {}
    only_within_nominal: set[int] = set()
    for v in candidates:
        qv, pv = int(queue[v]), int(priority[v])
        if qv == q:
            if s.preempt_lower_priority and pv < prio:
                reason[v] = "InClusterQueue"
        elif s.reclaim_within_cohort and usage[qv, p] > nominal[qv, p]:
            if not advantage and threshold is not None and pv < prio and pv <= threshold:
                reason[v] = "InCohortReclaimWhileBorrowing"
            else:
                reason[v] = "InCohortReclamation"
                if not advantage:
                    only_within_nominal.add(v)
    if not reason:
        return []
    order = candidates_ordering(reason, q, workloads)
    others = any(int(queue[v]) != q for v in order)
    forbidden = threshold is None
    if not others or (forbidden and not usage[q, p] < nominal[q, p]):
        attempts = [True]
    elif forbidden and not advantage:
        attempts = [False, True]
    else:
        attempts = [True, False]

    def fits(u: np.ndarray, borrowing: bool) -> bool:
        if not borrowing and u[q] + need > nominal[q, p]:
            return False
        return quota.fits_after(q, p, need, u)

    for borrowing in attempts:
        left = usage[:, p].copy()
        victims: list[int] = []
        for v in order:
            qv = int(queue[v])
            if qv != q:
                if borrowing and v in only_within_nominal:
                    continue
                if left[qv] <= nominal[qv, p]:
                    continue
            victims.append(v)
            left[qv] -= held[v].units
            if fits(left, borrowing):
                break
        else:
            continue
        for v in reversed(victims[:-1]):
            back = left.copy()
            back[int(queue[v])] += held[v].units
            if fits(back, borrowing):
                victims.remove(v)
                left = back
        return [Victim(v, reason[v]) for v in victims]
    return []


def plain_idle(rec: Recorder) -> list[float]:
    """Each pool's free GPUs summed over its Ready nodes afresh, node by node in index order."""
    free = rec.view.state.free_gpu_sum
    return [
        float(np.bincount(np.zeros(len(nodes), dtype=np.int64), weights=free[nodes] / MILLI, minlength=1)[0])
        for nodes in rec._ready_in
    ]


def plain_walk(rec: Recorder, idle: list[float]) -> list[tuple[int, float, bool]]:
    """Every demand group walked in order, every fit asked of the pool's Ready nodes."""
    matched = []
    for key in sorted(rec.demand, key=lambda k: len(k[1])):
        q, pools, need = key
        left = rec.demand[key]
        for p in pools:
            if left <= 1e-9:
                break
            take = min(left, idle[p])
            if take > 0:
                idle[p] -= take
                left -= take
                matched.append((q, take, bool(rec._fit_mask(rec._ready_in[p], need).any())))
    return matched


class ScanningRecorder(Recorder):
    """Blocked-while-idle with nothing kept between steps: idle GPUs summed afresh, every group walked, every fit
    asked of the nodes."""

    def advance(self, t: float) -> None:
        self._matched_at = (-1, -1, -1)
        super().advance(t)

    def _idle_gpus(self) -> list[float]:
        return plain_idle(self)

    def _match(self, idle: list[float]) -> list[tuple[int, float, bool]]:
        return plain_walk(self, idle)


class CheckedRecorder(Recorder):
    """Each step's idle GPUs compared with the sums taken afresh, each walk with a fresh walk; counts the walks
    and the groups with matches that a walk passed over (their last matches kept, not evaluated again)."""

    walks = 0
    passed_over = 0

    def _idle_gpus(self) -> list[float]:
        got = super()._idle_gpus()
        assert got == plain_idle(self)
        return got

    def _match(self, idle: list[float]) -> list[tuple[int, float, bool]]:
        want = plain_walk(self, idle.copy())
        kept = {id(g.matches) for groups in self._groups.values() for g in groups if g.matches}
        got = super()._match(idle)
        assert got == want
        self.walks += 1
        self.passed_over += sum(id(g.matches) in kept for groups in self._groups.values() for g in groups)
        return got


class Scanning(Traced):
    """The same engine with the straightforward scans."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.recorder = ScanningRecorder(world, self, self.allowed, self.flavors)
        self.recorder.unhostable_jobs = self.unhostable
        self.victim_calls = 0

    def _victims(self, j: int, p: int, need: int) -> list[Victim]:
        self.victim_calls += 1
        return scanned_victims(self.quota, self.w.settings, self.workloads, j, p, need, self.admitted_in[p])

    def _candidates(self, q: int, strict: bool) -> InOrder | ByShape:
        """Every waiting job of the queue visited in order, each asked whether it is skipped."""
        return InOrder([j for _, _, j in self.waiting_in[q]], strict)

    def _scale_up(self, t: float) -> None:
        """What every pending job's pods not yet placed ask, summed afresh at every instant."""
        for p, jobs in enumerate(self.pending):
            if jobs:
                want = 0
                for j in jobs:
                    pods = int(self.w.jobs.pods[j])
                    want += self.units(j, p) * (pods - len(self.jobs[j].placed)) // max(pods, 1)
                self._provision(p, self.autoscaler.scale_up(p, want, t), t)

    def _place(self, t: float) -> None:
        """Every pending job of each changed pool tried, in order: no memory of shapes that found no room, no
        index by shape."""
        self.placement.plain_choice = False
        for p in sorted(self.dirty_pools):
            nodes, pending = self.autoscaler.ready_in(p), self.pending[p]
            for j in [j for j in pending if self._place_job(j, nodes, t)]:
                pending.remove(j, self.pod_shape[j])
        self.dirty_pools.clear()


def loaded_world(
    seed: int,
    policy: str,
    autoscale: bool,
    threshold: int | None,
    lending: bool = False,
    alike: bool = False,
) -> World:
    """Three pools, four teams with equal nominal quotas and unlimited borrowing, 200 jobs arriving within 20
    minutes (whole-GPU gangs and GPU shares, three priorities): far more than the cluster runs at once.
    ``lending``: each team lends at most half its nominal quota (keeps the rest back). ``alike``: every pod
    asks the same CPU and memory and accepts every pool, so many jobs share a blocked-while-idle group."""
    rng = np.random.default_rng(seed)
    models = ["A"] * 4 + ["B"] * 3 + ["C"] * 2
    gpus = [8] * 4 + [4] * 3 + [2] * 2
    c = Cluster.build([f"n{i}" for i in range(len(models))], [96000] * len(models), [393216] * len(models),
                      gpus, models)  # fmt: skip
    pools = tuple(
        Pool(m, tuple(i for i, x in enumerate(models) if x == m), min_nodes=1, provision_s=120) for m in "ABC"
    )
    capacity = {m: sum(g for g, x in zip(gpus, models, strict=True) if x == m) for m in "ABC"}
    queues = tuple(
        Queue(
            f"t{q}",
            ("A", "B", "C")[q % 3 :] + ("A", "B", "C")[: q % 3],
            {m: capacity[m] // 4 for m in "ABC"},
            {m: None for m in "ABC"},
            {m: capacity[m] // 8 for m in "ABC"} if lending else {},
        )
        for q in range(4)
    )
    n = 200
    share = rng.random(n) < 0.3
    num_gpu = np.where(share, 1, rng.choice([1, 2, 4, 8], size=n))
    milli = np.where(share, rng.choice([250, 500], size=n), MILLI)
    spec = [str(rng.choice(["", "A", "B|C", "A|B"])) for _ in range(n)]
    cpu, mem = rng.choice([1000, 8000], size=n), rng.choice([2048, 16384], size=n)
    if alike:
        spec, cpu, mem = ["A|B|C"] * n, np.full(n, 1000), np.full(n, 2048)
    wl = Workload.build(cpu, mem, num_gpu, milli, spec)
    jobs = Jobs(
        arrival=np.sort(rng.uniform(0, 1200, size=n)).round(0),  # whole seconds: arrivals at the same instant
        duration=rng.uniform(60, 1800, size=n),
        pods=np.where(share, 1, rng.choice([1, 1, 2, 3], size=n)),
        queue=rng.integers(0, 4, size=n),
        priority=rng.choice([0, 10, 100], size=n),
        workload=wl,
    )
    settings = Settings(
        policy=policy,
        autoscale=autoscale,
        pods_ready_timeout_s=900,
        borrow_within_cohort_max_priority=threshold,
    )
    return World(c, pools, queues, jobs, settings)


class Checked(Traced):
    """Each answer of the (pod shape, pool) heap compared with the argmax of fresh scores over the pool's Ready
    nodes (the highest score, the lowest node index among equals; -1 when no node fits). The pools' ceilings let
    every pod through to the heap, so it answers the pods no node can take as well."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.placement.ceiling.may_fit = lambda p, gpus, milli: True  # type: ignore[method-assign]
        self.answers: list[int] = []
        heap_best = self.placement.best

        def best(s: int, p: int, nodes: np.ndarray, share: bool) -> int:
            got = heap_best(s, p, nodes, share)
            score, _ = score_nodes(self.placement.policy, s, nodes, self.placement.static, share)
            i = int(score.argmax())
            assert got == (int(nodes[i]) if score[i] >= 0 else -1)
            self.answers.append(got)
            return got

        self.placement.best = best  # type: ignore[method-assign]
        self.fit_asked: list[bool] = []
        node_fits = self.placement.fits

        def fits(s: int, nodes: list[int]) -> list[bool]:
            got = node_fits(s, nodes)
            at = np.array(nodes, dtype=np.int64)
            assert got == feasible(self.placement.state, self.placement.shapes, s, at).tolist()
            self.fit_asked += got
            return got

        self.placement.fits = fits  # type: ignore[method-assign]
        self.available_asked: list[int] = []
        quota, available = self.quota, self.quota.available

        def plain_available(q: int, p: int) -> int:
            got = available(q, p)
            own = quota.nominal[q, p] + quota.borrow[q, p] - quota.usage[q, p]
            kept = np.maximum(quota.nominal[:, p] - quota.lend[:, p] - quota.usage[:, p], 0)
            kept[q] = 0
            assert got == int(min(own, quota.capacity[p] - quota.usage[:, p].sum() - kept.sum()))
            self.available_asked.append(got)
            return got

        quota.available = plain_available  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("seed", "policy", "autoscale", "lending"),
    [(1, "MostAllocated", False, False), (2, "MostAllocated", True, False), (3, "FGD", False, False),
     (4, "MostAllocated", False, True)],
)  # fmt: skip
def test_each_heap_answer_is_the_pools_best_node(
    seed: int, policy: str, autoscale: bool, lending: bool
) -> None:
    sim = Checked(loaded_world(seed, policy, autoscale, None, lending))
    sim.run()
    # asked often, with room and without
    assert len(sim.answers) > 300 and sim.answers.count(-1) > 10 and len(set(sim.answers) - {-1}) > 5
    # fit tested node by node, both ways; quota asked with room and without
    assert sim.fit_asked.count(True) > 100 and sim.fit_asked.count(False) > 100
    assert len(set(sim.available_asked)) > 10 and min(sim.available_asked) <= 0


@pytest.mark.parametrize(
    ("seed", "policy", "autoscale", "threshold", "alike"),
    [
        (1, "MostAllocated", False, None, False),
        (2, "MostAllocated", True, 10, False),
        (3, "FGD", False, 10, False),
        (4, "RoundRobin", True, None, False),
        (5, "Random", False, None, False),
        (8, "MostAllocated", False, None, True),
    ],
)
def test_indexed_engine_decides_as_the_scanning_one(
    seed: int, policy: str, autoscale: bool, threshold: int | None, alike: bool
) -> None:
    world = loaded_world(seed, policy, autoscale, threshold, alike=alike)
    fast, slow = Traced(world), Scanning(world)
    got, want = fast.run(), slow.run()
    assert fast.log == slow.log
    assert got.to_dict(waits=True) == want.to_dict(waits=True)
    # the load is real: jobs waited, preemption was tried and happened
    assert want.preemptions > 0 and slow.victim_calls > want.preemptions and want.wait_p95_s > 0


@pytest.mark.parametrize(
    ("seed", "policy", "autoscale", "alike"),
    [
        (1, "MostAllocated", False, False),
        (2, "MostAllocated", True, False),
        (8, "MostAllocated", False, True),
    ],
)
def test_blocked_while_idle_kept_between_steps_equals_a_fresh_count(
    seed: int, policy: str, autoscale: bool, alike: bool
) -> None:
    """At every step the idle GPUs kept as running sums equal the sums taken afresh over the Ready nodes, and the
    walk that evaluates only the groups that can match otherwise gives the matches of a walk over every group."""
    world = loaded_world(seed, policy, autoscale, None, alike=alike)
    sim = Traced(world)
    rec = sim.recorder = CheckedRecorder(world, sim, sim.allowed, sim.flavors)
    rec.unhostable_jobs = sim.unhostable
    sim.run()
    # walked often, and groups with matches were passed over as they were
    assert rec.walks > 100 and rec.passed_over > 100


class HandView:
    """A run's view that a test changes by hand: every node Ready, readiness never changing."""

    def __init__(self, world: World) -> None:
        n = world.cluster.size
        self.state = ClusterState(world.cluster)
        self.ready = np.ones(n, dtype=bool)
        self.provisioning = np.zeros(n, dtype=bool)
        self.node_pool = np.full(n, -1, dtype=np.int64)
        for p, pool in enumerate(world.pools):
            self.node_pool[list(pool.nodes)] = p
        self.ready_version = 0
        self.changed: list[int] = []

    @property
    def alloc_version(self) -> int:
        return len(self.changed)


def test_a_kept_match_is_asked_again_whether_a_node_could_run_it_when_its_pools_nodes_change() -> None:
    """Pool A is full, pool B has two idle GPUs. A job waits for A, then one for B (a pod of 1 GPU and 4 CPUs,
    which B's node can run). Then a CPU-only pod lands on B's node (its idle GPUs stay two, but no node of B
    can run that pod now) and a second job joins the group waiting for A: the walk starts again at A's group
    and keeps the rest of the last walk, whose match in B must now count as fragmentation, not policy."""
    c = Cluster.build(["a0", "b0"], [8000, 8000], [65536, 65536], [1, 2], ["A", "B"])
    pools = (Pool("A", (0,)), Pool("B", (1,)))
    queues = (Queue("t0", ("A", "B"), {"A": 1, "B": 2}, {"A": None, "B": None}),)
    wl = Workload.build([1000, 4000, 1000], [1024] * 3, [1, 1, 1], [MILLI] * 3, ["A", "B", "A"])
    one = np.ones(3)
    jobs = Jobs(np.zeros(3), 100 * one, one.astype(np.int64), np.zeros(3, dtype=np.int64), np.zeros(3), wl)
    world = World(c, pools, queues, jobs, Settings(policy="MostAllocated", autoscale=False))
    view = HandView(world)
    rec = CheckedRecorder(world, view, [[0], [1], [0]], [[0, 1]])
    view.state.allocate(0, 0, 0, [0], MILLI)  # A has no idle GPU
    view.changed.append(0)
    rec.waiting(0, +1)
    rec.waiting(1, +1)
    rec.advance(10.0)
    rec.advance(20.0)  # matched in B over 0-20 s: 1 GPU a node could run
    view.state.allocate(1, 6000, 0, [], 0)  # B's idle GPUs as they were, its node short of CPU
    view.changed.append(1)
    rec.waiting(2, +1)
    rec.advance(30.0)  # matched in B over 20-30 s: 1 GPU no node could run
    assert rec.walks == 2
    assert rec.blocked[0] == pytest.approx(30.0) and rec.blocked_policy == pytest.approx(20.0)


def scanned_open_jobs(
    order: list[int], shape_of: dict[int, int], closed: set[int], closes: set[int]
) -> list[int]:
    """The jobs a scan of every job in order tries: those whose shape is not closed when their turn comes; trying
    a job of ``closes`` closes its shape (a pod that found no room)."""
    closed, tried = set(closed), []
    for j in order:
        if shape_of[j] not in closed:
            tried.append(j)
            if j in closes:
                closed.add(shape_of[j])
    return tried


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pending_jobs_by_shape_come_as_a_scan_tries_them(seed: int) -> None:
    """Jobs join and leave a pool's pending jobs; at every tenth change a pass that closes shapes as it goes
    visits, by shape, the jobs a scan of every job in order tries, in its order."""
    rng = np.random.default_rng(seed)
    pending = Pending()
    order: list[int] = []
    shape_of: dict[int, int] = {}
    passed_over = 0
    for step in range(400):
        if order and rng.random() < 0.3:
            j = order.pop(int(rng.integers(len(order))))
            pending.remove(j, shape_of[j])
        else:
            j = int(rng.integers(80))
            if j not in order:
                shape_of[j] = int(rng.integers(6))
                order.append(j)
                pending.add(j, shape_of[j])
        assert list(pending) == order and len(pending) == len(order)
        if step % 10:
            continue
        closed = {s for s in range(6) if rng.random() < 0.3}
        closes = {j for j in order if rng.random() < 0.2}
        want = scanned_open_jobs(order, shape_of, closed, closes)
        shut, got = set(closed), []
        for j in pending.open_jobs(lambda s, shut=shut: s not in shut):  # type: ignore[misc]
            got.append(j)
            if j in closes:
                shut.add(shape_of[j])
        assert got == want
        passed_over += len(order) - len(want)
    assert passed_over > 100  # shapes were closed, before and during the passes


class Ceilinged(Traced):
    """Each answer of the pools' ceilings compared with the most whole GPUs free on one node and the most free of
    one GPU, counted afresh over the pool's nodes, and with whether a Ready node of the pool has the GPUs."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.turned_away = 0
        self.let_through = 0
        ceiling, may_fit = self.placement.ceiling, self.placement.ceiling.may_fit
        pools = [np.array(pool.nodes, dtype=np.int64) for pool in world.pools]

        def fresh(p: int, gpus: int, milli: int) -> bool:
            got = may_fit(p, gpus, milli)
            free = self.placement.state.free_gpu[pools[p]]
            if milli >= MILLI:
                assert got == bool(((free >= MILLI).sum(axis=1) >= gpus).any())
            else:
                assert got == bool((free >= milli).any())
            ready = self.autoscaler.ready_in(p)
            if not got:  # no Ready node has them either: the pod is turned away only where none fits
                assert not ((self.placement.state.free_gpu[ready] >= milli).sum(axis=1) >= gpus).any()
                self.turned_away += 1
            else:
                self.let_through += 1
            return got

        ceiling.may_fit = fresh  # type: ignore[method-assign]


@pytest.mark.parametrize(("seed", "autoscale"), [(1, False), (2, True), (6, False)])
def test_a_pool_ceiling_turns_away_only_pods_no_node_can_take(seed: int, autoscale: bool) -> None:
    world = loaded_world(seed, "MostAllocated", autoscale, None)
    checked, plain = Ceilinged(world), Scanning(world)
    got, want = checked.run(), plain.run()
    assert checked.log == plain.log and got.to_dict(waits=True) == want.to_dict(waits=True)
    # asked both ways: pods turned away without scoring a node, and pods let through to the pool's heap
    assert checked.turned_away > 10 and checked.let_through > 50, (checked.turned_away, checked.let_through)
