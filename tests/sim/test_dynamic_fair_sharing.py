"""Fair sharing in the dynamic simulation (scheduler.sim.dynamic.fair_sharing, fair_preemption) on tiny cohorts
where Kueue's fair and classical answers differ: who is admitted first, and which workload is preempted.

The rules, Kueue v0.19.2: the dominant resource share (pkg/cache/scheduler/fair_sharing.go
`dominantResourceShare`: borrowed units ×1000 over what the root can lend, over the weight), the admission
tournament (pkg/scheduler/fair_sharing_iterator.go: not borrowing on the requested flavor, lower share after
admission, priority, FIFO), and `fairPreemptions` with `[LessThanOrEqualToFinalShare, LessThanInitialShare]`
(pkg/scheduler/preemption/preemption.go `runFirstFsStrategy`, `runSecondFsStrategy`). Most worlds here are one
8-GPU node, one pool, teams of nominal quota 2 each in team cohorts under the root; the root holds the rest
as spare quota, so what the root can lend is all 8 GPUs. Two borrowers at equal shares in two pools
(:func:`exchange`) show the exchange Kueue's first strategy allows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.sim.dynamic import Jobs, Pool, Queue, Settings, World
from scheduler.sim.dynamic.fair_sharing import Shares, Tree
from scheduler.sim.dynamic.quota import Quota
from tests.sim.test_dynamic import JOB_ROWS, Watched, cluster, jobs

FAIR = Settings(autoscale=False, pods_ready_timeout_s=None, requeue_batch_s=0, fair_sharing=True)
CLASSICAL = Settings(autoscale=False, pods_ready_timeout_s=None, requeue_batch_s=0)
POOL = (Pool("a", (0,)),)


def teams(*weights: float) -> tuple[Queue, ...]:
    """One queue per weight, nominal 2 GPUs of pool a, unlimited borrowing, each in its own team cohort."""
    return tuple(Queue(f"t{i}", ("a",), {"a": 2}, {"a": None}, weight=w, cohort=f"c{i}")
                 for i, w in enumerate(weights))  # fmt: skip


def run(queues: tuple[Queue, ...], rows: list[tuple[float, float, int, int]], prio: list[int],
        fair: bool, settings: Settings | None = None) -> tuple[dict[str, list[float]], list[tuple[int, int, str]]]:  # fmt: skip
    """Each queue's waits, and the (victim, preemptor, reason) of every preemption (``settings`` in place of the
    fair or classical ones)."""
    preempted: list[tuple[int, int, str]] = []

    class Recording(Watched):
        def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
            super().preempting(victim, preemptor, pool, reason)
            preempted.append((victim, preemptor, reason))

    chosen = settings or (FAIR if fair else CLASSICAL)
    world = World(cluster(1, gpus=8), POOL, queues, jobs(rows, prio=prio), chosen)
    result = Recording(world, check=True).run()
    return result.waits, preempted


# t=0: team 0 runs five 1-GPU jobs (borrows 3), team 1 two (within its 2): 7 of 8 GPUs held, all until t=100.
# t=10: one 1-GPU job each, team 0's at priority 200 (job 7), team 1's at 100 (job 8); one GPU is free.
BUSY = [(0, 100, 1, 0)] * 5 + [(0, 100, 1, 1)] * 2 + [(10, 100, 1, 0), (10, 100, 1, 1)]
BUSY_PRIO = [200] * 5 + [100] * 2 + [200, 100]


def test_the_lower_share_is_admitted_first_where_classical_takes_the_higher_priority() -> None:
    """Both heads would borrow after admission, so neither wins on not borrowing. Classical
    (`makeClassicalIterator`): then priority, so job 7 (200) takes the free GPU and job 8 waits for t=100
    (it borrows, so it may not reclaim). Fair: team 0's share after admission is (6-2)/8 = 500‰, team 1's
    (3-2)/8 = 125‰: job 8 goes first and job 7 waits to t=100; it cannot preempt either, as its own share
    (500‰) is neither ≤ team 1's after losing a job (0‰, S2-a) nor < team 1's now (125‰, S2-b)."""
    waits, preempted = run(teams(1, 1), BUSY, BUSY_PRIO, fair=False)
    assert (waits["t0"][-1], waits["t1"][-1]) == (0, 90)
    waits, preempted = run(teams(1, 1), BUSY, BUSY_PRIO, fair=True)
    assert (waits["t0"][-1], waits["t1"][-1]) == (90, 0)
    assert preempted == []


def test_a_heavier_weight_wins_the_tournament_though_it_borrows_more() -> None:
    """The same cycle with team 0's cohort at weight 8: its share after admission is 500‰/8 = 62.5‰, below
    team 1's 125‰, so job 7 goes first."""
    waits, _ = run(teams(8, 1), BUSY, BUSY_PRIO, fair=True)
    assert (waits["t0"][-1], waits["t1"][-1]) == (0, 90)


def test_a_borrowing_job_preempts_a_borrower_with_a_higher_share() -> None:
    """Three teams. t=0: team 0 holds its 2 GPUs (jobs 0-1), team 1 five (jobs 2-6, borrowing 3), team 2 one:
    the node is full. t=10: job 8 of team 0 asks 1 GPU, which would make team 0 borrow. Classical: a
    borrowing job may not reclaim (no `borrowWithinCohort`), so it waits to t=100. Fair (S2-a): team 1 is the
    only borrower; team 0's share with job 8 is (3-2)/8 = 125‰, team 1's after losing its most recently
    admitted job (job 6: equal admission times, the later index first) (4-2)/8 = 250‰ ≥ 125‰, so job 6 is
    preempted (InCohortFairSharing) and job 8 starts at once."""
    rows = [(0, 100, 1, 0)] * 2 + [(0, 100, 1, 1)] * 5 + [(0, 100, 1, 2), (10, 100, 1, 0)]
    prio = [100] * 9
    waits, preempted = run(teams(1, 1, 1), rows, prio, fair=False)
    assert waits["t0"][-1] == 90 and preempted == []
    waits, preempted = run(teams(1, 1, 1), rows, prio, fair=True)
    assert waits["t0"][-1] == 0
    assert preempted == [(6, 8, "InCohortFairSharing")]


def test_the_second_strategy_takes_a_whole_job_the_first_refuses() -> None:
    """t=0: team 0 holds 2 GPUs, team 1 one 4-GPU job (job 2, borrowing 2), team 2 two GPUs: full. t=10: job
    5 of team 0 asks 1 GPU. S2-a: team 0's share with it is 125‰; team 1 without job 2 would be at 0‰ < 125‰:
    refused. S2-b: 125‰ < team 1's share now, 250‰: job 2 is preempted."""
    rows = [(0, 100, 1, 0)] * 2 + [(0, 100, 4, 1)] + [(0, 100, 1, 2)] * 2 + [(10, 100, 1, 0)]
    prio = [100] * 6
    _, preempted = run(teams(1, 1, 1), rows, prio, fair=False)
    assert preempted == []
    waits, preempted = run(teams(1, 1, 1), rows, prio, fair=True)
    assert preempted == [(2, 5, "InCohortFairSharing")] and waits["t0"][-1] == 0


def test_no_preemption_when_the_preemptor_would_end_above_the_target() -> None:
    """Team 1 borrows 1 (job 2, 3 GPUs of its nominal 2); team 0 borrows 2 already and asks 1 more: its
    share with it, (5-2)/8 = 375‰, is above team 1's now (125‰) and after (0‰): no preemption, and it
    waits for t=100."""
    rows = [(0, 100, 4, 0), (0, 100, 1, 1), (0, 100, 2, 1), (0, 100, 1, 2), (10, 100, 1, 0)]
    waits, preempted = run(teams(1, 1, 1), rows, [100] * 5, fair=True)
    assert preempted == [] and waits["t0"][-1] == 90


def test_the_share_counts_what_a_team_lends_and_borrows_per_resource() -> None:
    """A team cohort of two queues: q0 nominal 4 lending at most 1, q1 nominal 2, in 12 units; a queue under
    the root with nominal 2 and weight 2. The root lends q0's 1, q1's 2, the other's 2 and its spare 12-8 = 4:
    9. q0 using 6 borrows 2 as a queue (2000/9 = 222‰); as the cohort it uses 6-3 = 3 beyond its local quota
    against the 3 it lends: borrows 0. The root queue using 5 borrows 3: 3000/9/2 = 167‰."""
    queues = (
        Queue("q0", ("a",), {"a": 4}, {"a": None}, {"a": 1}, cohort="team"),
        Queue("q1", ("a",), {"a": 2}, {"a": None}, cohort="team"),
        Queue("r", ("a",), {"a": 2}, {"a": None}, weight=2),
    )
    world = World(cluster(3, gpus=4), (Pool("a", (0, 1, 2)),), queues, jobs([(0, 1, 1, 0)]), FAIR)
    quota = Quota.of(world, {"a": 0})
    quota.usage[:, 0] = [6, 0, 5]
    shares = Shares(Tree.of(world), quota)
    assert round(shares.queue(0).key()[1], 1) == round(2000 / 9, 1)
    assert shares.cohort(0).key() == (0, 0.0) and not shares.cohort(0).borrowing
    assert round(shares.queue(2).key()[1], 1) == round(3000 / 9 / 2, 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    JOB_ROWS,
    st.sampled_from([1.0, 2.0]),
)
# a preemption of two of t1's jobs in `small` where the first leaves t1 within its quota there: Kueue chose
# both while t1 borrowed (the check reads the usage before the preemption)
@example([(0, 1, 1, 0, 1, 10)] * 3 + [(0, 2, 1, 0, 1, 10)] * 3 + [(0, 2, 1, 0, 2, 10), (0, 2, 1, 1, 1, 10)]
         + [(0, 2, 2, 1, 2, 10)] * 2 + [(0, 1, 1, 0, 1, 10)] * 2 + [(0, 2, 2, 1, 2, 10), (1, 1, 4, 0, 2, 10)],
         1.0)  # fmt: skip
def test_kueues_guarantees_hold_under_fair_sharing(rows: list[tuple[int, ...]], weight: float) -> None:
    """Random jobs of three teams (two in team cohorts, one under the root) on two pools: Kueue's guarantees
    (:class:`Watched`: conservation, limits, preemption only of borrowed or lower-priority work, no team
    waiting within its nominal quota while another borrows) hold under fair sharing too."""
    big = Cluster.build([f"big-{i}" for i in range(2)] + [f"small-{i}" for i in range(3)], [128000] * 5,
                        [1048576] * 5, [8, 8, 4, 4, 4], ["big", "big", "small", "small", "small"])  # fmt: skip
    pools = (Pool("big", (0, 1), resource="gpu"), Pool("small", (2, 3, 4), resource="gpu"))
    queues = (
        Queue("t0", ("big", "small"), {"big": 8, "small": 4}, {"big": None, "small": 4}, weight=weight,
              cohort="c0"),
        Queue("t1", ("small", "big"), {"small": 8}, {"small": None, "big": 16}, cohort="c1"),
        Queue("t2", ("big",), {"big": 8}, {"big": 0}),
    )  # fmt: skip
    n = len(rows)
    wl = Workload.build([1000] * n, [1024] * n, [r[2] for r in rows], [MILLI] * n, ["big|small"] * n)
    js = Jobs(np.array([r[0] for r in rows], dtype=np.float64), np.array([r[1] for r in rows], dtype=np.float64),
              np.array([r[4] for r in rows]), np.array([r[3] for r in rows]), np.array([r[5] for r in rows]), wl)  # fmt: skip
    world = World(
        big, pools, queues, js, Settings(autoscale=False, pods_ready_timeout_s=600, fair_sharing=True)
    )
    result = Watched(world, check=True).run()
    assert result.started + result.never_started + result.unhostable == n


def exchange_world(
    m_jobs_of_t2: int, settings: Settings = FAIR, a_s: float = 100.0
) -> tuple[World, set[int], set[int], int]:
    """Pool a (16 GPUs, all team o's quota) and pool m (6 GPUs nobody has as quota), each a resource of its
    own; t1 (weight 2) and t2 (weight 1) have no quota and borrow in both. t=0: t1 takes 4 GPUs of m for 1000 s
    (4000/6 = 667‰, weighted 333‰) and t2 ``m_jobs_of_t2``; in a, for ``a_s`` (100 s), o runs 10 jobs within its quota,
    t1 4 (4000/16 = 250‰) and t2 2 (125‰): a is full. t=10: one more job of t2 in a. Returns the world,
    t1's and t2's jobs in a, and the job that comes at t=10."""
    world_cluster = Cluster.build(
        ["a-0", "a-1", "m-0"], [64000] * 3, [262144] * 3, [8, 8, 6], ["a", "a", "m"]
    )
    pools = (Pool("a", (0, 1), resource="a"), Pool("m", (2,), resource="m"))
    queues = (
        Queue("o", ("a",), {"a": 16}, {"a": None}, cohort="co"),
        Queue("t1", ("a", "m"), {"a": 0, "m": 0}, {"a": None, "m": None}, weight=2, cohort="c1"),
        Queue("t2", ("a", "m"), {"a": 0, "m": 0}, {"a": None, "m": None}, cohort="c2"),
    )
    rows = [(0, 1000, 1, "m")] * 4 + [(0, 1000, 2, "m")] * m_jobs_of_t2 + [(0, a_s, 0, "a")] * 10
    t1_a = set(range(len(rows), len(rows) + 4))
    rows += [(0, a_s, 1, "a")] * 4
    t2_a = set(range(len(rows), len(rows) + 3))
    rows += [(0, a_s, 2, "a")] * 2 + [(10, a_s, 2, "a")]
    n = len(rows)
    js = Jobs(np.array([r[0] for r in rows], dtype=np.float64), np.array([r[1] for r in rows], dtype=np.float64),
              np.ones(n, dtype=np.int64), np.array([r[2] for r in rows]), np.full(n, 100, dtype=np.int64),
              Workload.build([1000] * n, [1024] * n, [1] * n, [MILLI] * n, [r[3] for r in rows]))  # fmt: skip
    return World(world_cluster, pools, queues, js, settings), t1_a, t2_a, n - 1


def exchange(
    m_jobs_of_t2: int, settings: Settings = FAIR
) -> tuple[list[tuple[int, int, str]], set[int], set[int], int]:
    """The world of :func:`exchange_world` run: every preemption (victim, preemptor, reason), t1's and t2's
    jobs in a, and the job that comes at t=10."""
    world, t1_a, t2_a, newcomer = exchange_world(m_jobs_of_t2, settings)
    preempted: list[tuple[int, int, str]] = []

    class Recording(Watched):
        def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
            super().preempting(victim, preemptor, pool, reason)
            preempted.append((victim, preemptor, reason))

    Recording(world, check=True).run()
    return preempted, t1_a, t2_a, newcomer


def test_two_borrowers_at_equal_shares_take_a_pool_from_each_other_as_kueue_allows() -> None:
    """With t2 on 2 GPUs of m both teams stand at 333‰ weighted, and m, not a, is each one's dominant resource,
    so a job of a moves neither share. LessThanOrEqualToFinalShare (pkg/scheduler/preemption/fairsharing/
    strategy.go: `CompareDRS(preemptorNewShare, targetNewShare) <= 0`) then holds both ways: t2's new job
    preempts one of t1's in a, that job preempts it back, and so on until the jobs of a end. Kueue's own rule:
    the engine keeps it (on the twin Kueue preempts without end too, re-admitting the victim ahead of the
    preemptor between preemptions: tests/twin/test_fair_sharing_exchange.py)."""
    preempted, t1_a, t2_a, newcomer = exchange(2)
    assert {reason for _, _, reason in preempted} == {"InCohortFairSharing"}
    assert preempted[0][1] == newcomer and preempted[0][0] in t1_a
    by_t2 = [(v, p) for v, p, _ in preempted if p in t2_a and v in t1_a]
    by_t1 = [(v, p) for v, p, _ in preempted if p in t1_a and v in t2_a]
    assert len(by_t2) + len(by_t1) == len(preempted)
    assert len(by_t2) >= 2 and len(by_t1) >= 2
    assert max(by_t1.count(pair) for pair in set(by_t1)) >= 2  # the same pair, again


def test_a_borrower_below_the_others_share_takes_a_pool_once() -> None:
    """With t2 on 1 GPU of m its share is 167‰, 188‰ with its new job of a: at most t1's 333‰ without one of its
    jobs (S2-a), so it preempts. t1's job back would stand at 333‰, neither at most t2's 167‰ without one job
    (S2-a) nor below t2's 188‰ now (S2-b): it waits. One preemption."""
    preempted, t1_a, _, newcomer = exchange(1)
    assert len(preempted) == 1
    victim, preemptor, reason = preempted[0]
    assert preemptor == newcomer and victim in t1_a and reason == "InCohortFairSharing"


S2A = replace(FAIR, fair_preemption_strategies=("LessThanOrEqualToFinalShare",))
S2B = replace(FAIR, fair_preemption_strategies=("LessThanInitialShare",))


def test_with_only_the_first_strategy_the_whole_job_is_not_taken() -> None:
    """The world of the second-strategy test under `[LessThanOrEqualToFinalShare]` alone: S2-a refuses job 2
    (team 1 would end at 0‰ < 125‰) and no second strategy runs (`fairPreemptions` tries one only when
    configured), so job 5 waits for t=100."""
    rows = [(0.0, 100.0, 1, 0)] * 2 + [(0.0, 100.0, 4, 1)] + [(0.0, 100.0, 1, 2)] * 2 + [(10.0, 100.0, 1, 0)]
    waits, preempted = run(teams(1, 1, 1), rows, [100] * 6, fair=True, settings=S2A)
    assert preempted == [] and waits["t0"][-1] == 90


def test_with_only_the_strict_strategy_equal_borrowers_do_not_exchange() -> None:
    """`[LessThanInitialShare]` alone (rule S2-b as the first and only strategy): at equal shares (333‰ each)
    t2's newcomer is not below t1's share, so nobody is preempted; a borrower below (t2 with 1 GPU of m, 188‰
    with its newcomer, against t1's 333‰) still takes the pool, once."""
    preempted, _, _, _ = exchange(2, S2B)
    assert preempted == []
    preempted, t1_a, _, newcomer = exchange(1, S2B)
    assert len(preempted) == 1 and preempted[0][1] == newcomer and preempted[0][0] in t1_a
