"""The dynamic simulation (scheduler.sim.dynamic) on tiny hand-made clusters: numbers a person can work out by
hand, and the queueing invariants Kueue promises, checked at every step of random workloads (hypothesis).

Kueue v0.19 rules encoded here (Kueue docs "Cluster Queue": nominalQuota, borrowingLimit, lendingLimit;
"Preemption": `reclaimWithinCohort: Any` takes back quota only from ClusterQueues that borrow,
`withinClusterQueue: LowerPriority` only from lower priorities; "Sequential admission with ready pods":
`waitForPodsReady`), and the cluster-autoscaler FAQ ("How does scale-down work?": a node unneeded for
`--scale-down-unneeded-time` is removed).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.sim.dynamic import Jobs, Pool, Queue, Settings, Simulation, World, simulate
from scheduler.sim.dynamic.engine import ADMITTED, READY_TIMEOUT, WAITING
from scheduler.sim.dynamic.preemption import Victim


def cluster(nodes: int, gpus: int = 4, pool: str = "a") -> Cluster:
    return Cluster.build([f"{pool}-{i}" for i in range(nodes)], [64000] * nodes, [262144] * nodes,
                         [gpus] * nodes, [pool] * nodes)  # fmt: skip


def jobs(rows: list[tuple[float, float, int, int]], pods: list[int] | None = None, prio: list[int] | None = None,
         pool: str = "a") -> Jobs:  # fmt: skip
    """rows: (arrival s, duration s, GPUs per pod, queue index)."""
    n = len(rows)
    wl = Workload.build([1000] * n, [1024] * n, [r[2] for r in rows], [MILLI] * n, [pool] * n)
    return Jobs(
        arrival=np.array([r[0] for r in rows], dtype=np.float64),
        duration=np.array([r[1] for r in rows], dtype=np.float64),
        pods=np.array(pods or [1] * n, dtype=np.int64),
        queue=np.array([r[3] for r in rows], dtype=np.int64),
        priority=np.array(prio or [100] * n, dtype=np.int64),
        workload=wl,
    )


def two_teams(borrow: int | None) -> tuple[Queue, Queue]:
    return (
        Queue("a-team", ("a",), {"a": 2}, {"a": borrow}),
        Queue("b-team", ("a",), {"a": 2}, {"a": borrow}),
    )


# Instant requeue (requeue_batch_s 0) keeps the hand-made timings whole; the batch has its own test below
FIXED = Settings(autoscale=False, pods_ready_timeout_s=None, requeue_batch_s=0)


def test_a_job_waits_for_the_one_before_it_to_finish() -> None:
    """One node of 4 GPUs, two 4-GPU jobs at t=0 for 100 s: the second waits 100 s, the run ends at 200 s."""
    world = World(cluster(1), (Pool("a", (0,)),), (Queue("t", ("a",), {"a": 4}),),
                  jobs([(0, 100, 4, 0), (0, 100, 4, 0)]), FIXED)  # fmt: skip
    r = simulate(world, check=True)
    assert r.makespan_s == 200
    assert sorted(r.waits["t"]) == [0, 100]
    assert r.blocked_idle_gpu_hours == 0  # nothing idle while the second waited
    assert r.gpu_hours == pytest.approx(2 * 4 * 100 / 3600)


def test_static_quota_blocks_work_while_gpus_idle() -> None:
    """Quota 2 each, no borrowing (borrowingLimit 0): team a's four 1-GPU jobs run two at a time while team b's
    two GPUs sit idle, so two GPUs of demand are blocked while idle for the first 100 s."""
    world = World(cluster(1), (Pool("a", (0,)),), two_teams(0), jobs([(0, 100, 1, 0)] * 4), FIXED)
    r = simulate(world, check=True)
    assert r.makespan_s == 200
    assert r.blocked_idle_gpu_hours == pytest.approx(2 * 100 / 3600)
    a = r.teams[0]
    assert (a.wait_p50_s, a.wait_max_s) == (50.0, 100.0)
    # with borrowing the same work runs at once on the idle GPUs
    lent = simulate(World(cluster(1), (Pool("a", (0,)),), two_teams(None), jobs([(0, 100, 1, 0)] * 4), FIXED))
    assert lent.makespan_s == 100 and lent.blocked_idle_gpu_hours == 0


def test_the_owner_reclaims_borrowed_gpus() -> None:
    """Team a borrows b's two GPUs at t=0; b submits 2 GPUs at t=30: `reclaimWithinCohort: Any` preempts a's
    most recently admitted borrowed job, b runs at once, a's job is requeued and reruns after a's others."""
    rows = [(0, 100, 1, 0)] * 4 + [(30, 100, 2, 1)]
    r = simulate(World(cluster(1), (Pool("a", (0,)),), two_teams(None), jobs(rows), FIXED), check=True)
    a, b = r.teams
    assert b.wait_max_s == 0
    assert a.preempted == 2 and b.preempted == 0  # two 1-GPU borrowed jobs give way to b's 2 GPUs
    assert a.preempted_gpu_hours == pytest.approx(2 * 30 / 3600)
    assert r.makespan_s == 200  # the requeued pair runs after the first pair, 100 s later


def test_lower_priority_gives_way_within_the_queue() -> None:
    """`withinClusterQueue: LowerPriority`: a higher-priority job of the same queue evicts a lower one; an equal
    priority waits."""
    rows = [(0, 100, 4, 0), (10, 50, 4, 0)]
    high = simulate(World(cluster(1), (Pool("a", (0,)),), (Queue("t", ("a",), {"a": 4}),),
                          jobs(rows, prio=[10, 1000]), FIXED), check=True)  # fmt: skip
    assert high.preemptions == 1 and high.makespan_s == 160
    same = simulate(World(cluster(1), (Pool("a", (0,)),), (Queue("t", ("a",), {"a": 4}),), jobs(rows), FIXED))
    assert same.preemptions == 0 and same.makespan_s == 150


def test_the_autoscaler_adds_a_node_after_its_delay_and_removes_it_when_unneeded() -> None:
    """A pool at 0 nodes: a job at t=0 waits the 600 s provisioning delay; the node goes 600 s after the job
    ends (`--scale-down-unneeded-time=10m`), so the pool ran one node for 600 + 100 + 600 s."""
    world = World(cluster(2), (Pool("a", (0, 1), min_nodes=0, provision_s=600, node_price_hour=36.0),),
                  (Queue("t", ("a",), {"a": 8}),), jobs([(0, 100, 4, 0)]), Settings(pods_ready_timeout_s=None))  # fmt: skip
    r = simulate(world, check=True)
    assert r.waits["t"] == [600.0]
    assert r.node_hours == pytest.approx(1300 / 3600)
    assert r.cost == pytest.approx(36.0 * 1300 / 3600)


def test_a_gang_runs_only_when_all_its_pods_do_and_times_out_otherwise() -> None:
    """Three 4-GPU nodes; two 1-GPU jobs spread over nodes 0 and 1 (LeastAllocated) for 1000 s. A gang of two
    4-GPU pods fits the quota (2 + 8 of 12 GPUs) but only one pod finds a whole node: it holds that node until
    `waitForPodsReady.timeout` (300 s) evicts the gang and requeues it, and it runs once both nodes are free."""
    rows = [(0, 1000, 1, 0), (0, 1000, 1, 0), (10, 100, 4, 0)]
    world = World(cluster(3), (Pool("a", (0, 1, 2)),), (Queue("t", ("a",), {"a": 12}),),
                  jobs(rows, pods=[1, 1, 2]), Settings(policy="LeastAllocated", autoscale=False,
                  pods_ready_timeout_s=300))  # fmt: skip
    r = simulate(world, check=True)
    assert r.ready_timeouts == 3  # at 310, 610 and 910; readmitted each time
    assert sorted(r.waits["t"]) == [0, 0, 990]  # the gang starts when the 1-GPU jobs end at t=1000
    assert r.makespan_s == 1100
    assert r.preemptions == 0 and r.preempted_gpu_hours == 0


def test_freed_quota_is_retried_after_kueues_requeue_batch() -> None:
    """Kueue v0.19.2 pkg/cache/queue/inadmissible_workloads.go: a workload that did not fit waits among the
    inadmissible ones until quota is released, and then for the batched requeue (`requeueBatchPeriod`,
    1 s, workqueue AddAfter): the second job starts 101 s after it arrived, not 100 s."""
    rows = [(0, 100, 4, 0), (0, 100, 4, 0)]
    world = World(cluster(1), (Pool("a", (0,)),), (Queue("t", ("a",), {"a": 4}),), jobs(rows),
                  Settings(autoscale=False, pods_ready_timeout_s=None))  # fmt: skip
    r = simulate(world, check=True)
    assert sorted(r.waits["t"]) == [0, 101]


def test_the_owner_gets_freed_gpus_before_an_older_borrower() -> None:
    """Kueue v0.19.2 pkg/scheduler/scheduler.go: each cycle takes the head of every ClusterQueue and tries
    those that fit within their nominal quota before those that would borrow (`entryOrdering`, then priority,
    then FIFO). Team a's 4-GPU job waiting since t=1 would borrow; team b's 2-GPU job from t=2 fits b's quota:
    when a's first job ends at 50 s, b's goes first (reclaim off, so only the order decides)."""
    rows = [(0, 50, 4, 0), (1, 100, 4, 0), (2, 100, 2, 1)]
    no_reclaim = Settings(
        autoscale=False, pods_ready_timeout_s=None, requeue_batch_s=0, reclaim_within_cohort=False
    )
    r = simulate(World(cluster(1), (Pool("a", (0,)),), two_teams(None), jobs(rows), no_reclaim), check=True)
    a, b = r.teams
    assert b.wait_max_s == 48  # 2 s to 50 s
    assert a.wait_max_s == 149  # 1 s to 150 s, when b's job ends


def test_a_preempted_job_keeps_its_place_in_the_queue() -> None:
    """Kueue v0.19.2 pkg/workload `Ordering.GetQueueOrderTimestamp`: a preempted Workload is ordered by its
    creation time (only a waitForPodsReady timeout with `requeuingStrategy.timestamp: Eviction` uses the
    eviction's). V (t=0) is preempted at t=10 by a higher priority; when that ends at 60, V runs before W,
    which arrived at t=5 with V's priority, so W waits until 160."""
    rows = [(0, 100, 4, 0), (5, 100, 4, 0), (10, 50, 4, 0)]
    r = simulate(World(cluster(1), (Pool("a", (0,)),), (Queue("t", ("a",), {"a": 4}),),
                       jobs(rows, prio=[10, 10, 1000]), FIXED), check=True)  # fmt: skip
    assert r.preemptions == 1
    assert sorted(r.waits["t"]) == [0, 0, 155]


class Reasons(Simulation):
    """Records each preemption's reason, as Kueue names it in the victim's `Preempted` condition."""

    def __init__(self, world: World) -> None:
        super().__init__(world, check=True)
        self.reasons: list[str] = []

    def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
        self.reasons.append(reason)


@pytest.mark.parametrize(
    ("threshold", "borrower", "owner", "reason"),
    [
        (
            None,
            10,
            100,
            None,
        ),  # borrowWithinCohort Never (the API's default): a borrowing job reclaims nothing
        (100, 10, 100, "InCohortReclaimWhileBorrowing"),
        (100, 100, 1000, "InCohortReclaimWhileBorrowing"),  # at the threshold: still allowed
        (100, 500, 1000, None),  # above maxPriorityThreshold
        (100, 100, 100, None),  # not lower than the preemptor's
    ],
)
def test_borrow_within_cohort_reclaims_lower_priority_work_while_borrowing(
    threshold: int | None, borrower: int, owner: int, reason: str | None
) -> None:
    """Kueue v0.19.2 pkg/scheduler/preemption/classical/hierarchical_preemption.go (classifyPreemptionVariant,
    isAboveBorrowingThreshold) and preemption.go (classicalPreemptions): a job that would borrow after
    admission may preempt another queue's borrowed work only under `borrowWithinCohort: LowerPriority`, and
    only work of lower priority than its own and at most `maxPriorityThreshold` (reason
    InCohortReclaimWhileBorrowing); otherwise it must fit within its own nominal quota. Queues of 4 GPUs each
    on one 8-GPU node: b borrows 2 with a 6-GPU job at t=0; at t=10 a asks 6, more than its nominal 4."""
    world = World(cluster(1, gpus=8), (Pool("a", (0,)),),
                  (Queue("a-team", ("a",), {"a": 4}), Queue("b-team", ("a",), {"a": 4})),
                  jobs([(0, 100, 6, 1), (10, 50, 6, 0)], prio=[borrower, owner]),
                  Settings(autoscale=False, pods_ready_timeout_s=None, requeue_batch_s=0,
                           borrow_within_cohort_max_priority=threshold))  # fmt: skip
    sim = Reasons(world)
    r = sim.run()
    if reason is None:
        assert sim.reasons == [] and r.preemptions == 0
        assert r.waits["a-team"] == [90]  # until b's job ends at 100
    else:
        assert sim.reasons == [reason]
        assert r.waits["a-team"] == [0]


def test_a_job_within_its_nominal_quota_reclaims_any_priority() -> None:
    """The same file, `haveHierarchicalAdvantage`: a job that fits within its own queue's nominal quota takes
    back lent quota from work of any priority (InCohortReclamation), borrowWithinCohort or not. b's
    production job borrows 2 GPUs; a's 4-GPU preemptible job at t=10 reclaims them."""
    world = World(cluster(1, gpus=8), (Pool("a", (0,)),),
                  (Queue("a-team", ("a",), {"a": 4}), Queue("b-team", ("a",), {"a": 4})),
                  jobs([(0, 100, 6, 1), (10, 50, 4, 0)], prio=[1000, 10]),
                  Settings(autoscale=False, pods_ready_timeout_s=None, requeue_batch_s=0,
                           borrow_within_cohort_max_priority=100))  # fmt: skip
    sim = Reasons(world)
    r = sim.run()
    assert sim.reasons == ["InCohortReclamation"]
    assert r.waits["a-team"] == [0]


def test_strict_fifo_blocks_behind_the_head_best_effort_does_not() -> None:
    """StrictFIFO vs BestEffortFIFO (Kueue "Cluster Queue", queueingStrategy): a 4-GPU head that does not fit
    holds back a 1-GPU job behind it only under StrictFIFO."""
    rows = [(0, 100, 3, 0), (1, 100, 4, 0), (2, 100, 1, 0)]
    q = (Queue("t", ("a",), {"a": 4}),)
    best = simulate(World(cluster(1), (Pool("a", (0,)),), q, jobs(rows), FIXED))
    strict = simulate(World(cluster(1), (Pool("a", (0,)),), q, jobs(rows), Settings(autoscale=False,
                      pods_ready_timeout_s=None, strict_fifo=True)))  # fmt: skip
    assert best.waits["t"][2] == 0
    assert strict.waits["t"][2] > 0


class Watched(Simulation):
    """Checks Kueue's guarantees after every step and at every preemption."""

    def __init__(self, world: World, check: bool = False) -> None:
        super().__init__(world, check=check)
        self.just_preempted: set[int] = set()  # victims of the current instant
        self.timed_out: set[int] = set()  # evicted by the PodsReady timeout since the last batched requeue

    def _handle(self, t: float, kind: int, a: int, b: int) -> None:
        evicted = kind == READY_TIMEOUT and self.jobs[a].state == ADMITTED and self.jobs[a].run == b
        super()._handle(t, kind, a, b)
        if evicted:
            self.timed_out.add(a)

    def _preempt(self, j: int, p: int, victims: list[Victim], t: float) -> None:
        # Kueue picks a preemption's candidates from the usage before any of them is evicted (v0.19.2
        # preemption.go `findCandidates`, `cqIsBorrowing`): a second victim of a queue may leave it within
        # its quota once the first is gone.
        self.usage_before = self.usage.copy()
        super()._preempt(j, p, victims, t)

    def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
        self.just_preempted.add(victim)
        qv, qp = int(self.w.jobs.queue[victim]), int(self.w.jobs.queue[preemptor])
        borrowing = self.usage_before[qv, pool] > self.nominal[qv, pool]
        lower = qv == qp and self.w.jobs.priority[victim] < self.w.jobs.priority[preemptor]
        assert (qv != qp and borrowing) or lower, (
            "preempted work that was neither borrowed nor lower priority"
        )

    def after_cycle(self, t: float) -> None:
        super().after_cycle(t)
        # No team waits within its guarantee while another borrows in that pool (reclaimWithinCohort: Any).
        queued = {j for mine in self.waiting_in for _, _, j in mine}  # arrived and waiting
        for j, job in enumerate(self.jobs):
            if job.state != WAITING or j not in queued:
                continue
            if self.requeue_due and (
                self.shape_of[j] in self.parked or self.shape_of[j] in self.inadmissible
            ):
                continue  # quota changed within the batch period: Kueue retries it at the batched requeue
            if self.requeue_due and j in self.timed_out:
                # Kueue requeues a job evicted by waitForPodsReady after its backoff (requeuingStrategy), not
                # in the cycle that evicted it; the engine retries it at the batched requeue
                continue
            if j in self.just_preempted:
                # Kueue requeues a victim once its eviction completes, not in the cycle that preempted it
                # (v0.19.2 pkg/controller/core/workload_controller.go, the update handler's case
                # FromQuotaReservedOrAdmittedToPending); the engine retries it at the next event
                continue
            q = int(self.w.jobs.queue[j])
            for p in self.flavors[q]:
                if p not in self.allowed[j]:
                    continue
                within = self.usage[q, p] + self.units(j, p) <= self.nominal[q, p]
                others = [
                    o for o in range(len(self.w.queues)) if o != q and self.usage[o, p] > self.nominal[o, p]
                ]
                assert not (within and others), f"t={t}: job {j} waits within its quota while {others} borrow"
        self.just_preempted.clear()
        if not self.requeue_due:
            self.timed_out.clear()


# Random jobs (arrival, duration, GPUs per pod, queue, pods, priority) for the property tests of the engine.
JOB_ROWS = st.lists(
    st.tuples(
        st.integers(0, 2000),
        st.integers(1, 900),
        st.sampled_from([1, 2, 4, 8]),
        st.integers(0, 2),
        st.integers(1, 2),
        st.sampled_from([10, 100, 1000]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    JOB_ROWS,
    st.booleans(),
    st.sampled_from(["MostAllocated", "FGD", "RoundRobin"]),
    st.sampled_from([None, 100]),
)
def test_queueing_invariants_hold_at_every_step(
    rows: list[tuple[int, ...]], autoscale: bool, policy: str, threshold: int | None
) -> None:
    """Random jobs of three teams on two pools (8-GPU and 4-GPU nodes): at every step GPUs are conserved,
    no queue is beyond nominal + borrowing limit, no pool beyond its capacity, nothing held on a node that
    is not Ready; preemption takes only borrowed or lower-priority work; no team waits within its guarantee
    while another borrows (but for the batched requeue's second, as in Kueue); every job that fits runs to
    its end; with borrowWithinCohort or without."""
    big = Cluster.build([f"big-{i}" for i in range(2)] + [f"small-{i}" for i in range(3)], [128000] * 5,
                        [1048576] * 5, [8, 8, 4, 4, 4], ["big", "big", "small", "small", "small"])  # fmt: skip
    pools = (Pool("big", (0, 1), provision_s=120), Pool("small", (2, 3, 4), min_nodes=1, provision_s=60))
    queues = (
        Queue("t0", ("big", "small"), {"big": 8, "small": 4}, {"big": None, "small": 4}),
        Queue("t1", ("small", "big"), {"small": 8}, {"small": None, "big": 16}),
        Queue("t2", ("big",), {"big": 8}, {"big": 0}),
    )
    n = len(rows)
    wl = Workload.build([1000] * n, [1024] * n, [r[2] for r in rows], [MILLI] * n, ["big|small"] * n)
    js = Jobs(np.array([r[0] for r in rows], dtype=np.float64), np.array([r[1] for r in rows], dtype=np.float64),
              np.array([r[4] for r in rows]), np.array([r[3] for r in rows]), np.array([r[5] for r in rows]), wl)  # fmt: skip
    world = World(
        big,
        pools,
        queues,
        js,
        Settings(
            policy=policy,
            autoscale=autoscale,
            pods_ready_timeout_s=600,
            borrow_within_cohort_max_priority=threshold,
        ),
    )
    result = Watched(world, check=True).run()
    assert result.started + result.never_started + result.unhostable == n
    for team in result.teams:
        assert team.gpu_hours >= 0 and team.preempted_gpu_hours <= team.gpu_hours + 1e-9


def test_the_same_seed_gives_the_same_run() -> None:
    rng = np.random.default_rng(3)
    rows = [(float(rng.uniform(0, 500)), float(rng.uniform(10, 300)), int(rng.choice([1, 2, 4])), int(rng.integers(0, 2)))
            for _ in range(60)]  # fmt: skip
    world = World(cluster(3), (Pool("a", (0, 1, 2), provision_s=60),), two_teams(None), jobs(rows),
                  Settings(policy="FGD"))  # fmt: skip
    assert simulate(world).to_dict() == simulate(world).to_dict()
