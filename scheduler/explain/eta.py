"""When a waiting job starts: the dynamic simulator run from the seeded live state (``seed``), several times with
the unknown remaining times drawn afresh, the job's start in each run giving the p50 and p90.

A run's clock starts now: admitted work arrives at 0 and holds its quota for its remaining time, the waiting
work follows in Kueue's order a millisecond apart (so each is tried in that order), and the job's start is
when every pod of it runs (``Simulation.jobs[j].first_start``). When nothing is unknown the runs agree and
one is made.

Later submissions (``Seed.streams``) are drawn afresh in every run, seeded by the run: each stream's Poisson
arrivals over its horizon (at most MAX_ARRIVALS of them), each a shape drawn from the stream's, after
the seeded work. A run stops once the job runs, since nothing later changes its first start; with later
arrivals the runs differ, so all `runs` are made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.explain.durations import (
    CAUGHT,
    HISTORY,
    NO_HISTORY_S,
    SIMILAR_AT_LEAST,
    Finished,
    draw,
    history_for,
    holding_lag,
)
from scheduler.explain.seed import OTHERS, Entry, Seed, Stream, human_time, job_count
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.sim.dynamic.engine import Simulation
from scheduler.sim.dynamic.model import Jobs, Pool, World

RUNS = 20
STEP_S = 0.001  # between waiting jobs' arrivals: Kueue's order kept as arrival order
NODE_CPU_MILLI, NODE_MEMORY_MIB = 10**6, 10**7  # GPUs are what the estimate counts; CPU and memory never bind
MAX_ARRIVALS = 200  # later submissions of a stream in one run, at most
LATER = "later"  # the entries standing for later submissions: `later/<stream>/<n>`


@dataclass(frozen=True)
class Estimate:
    """Seconds from now to the job's start, p50 and p90 over `runs` runs (None: it did not start within the
    simulated future in at least that share of runs), and what was assumed."""

    p50_s: float | None
    p90_s: float | None
    runs: int
    never: int  # runs in which it did not start
    assumed: tuple[str, ...]
    unseen: tuple[str, ...]


def world_of(
    seed: Seed, durations: Sequence[float], seed_value: int = 0, later: Sequence[tuple[float, Entry]] = ()
) -> World:
    """One simulator input: the seed with every entry's remaining time fixed to `durations`, and `later`
    (arrival in seconds from now, entry) submitted after it, their times last in `durations`."""
    names: list[str] = []
    units: list[int] = []
    models: list[str] = []
    pools = []
    for p, (pool, nodes) in enumerate(sorted(seed.pools.items())):
        first = len(names)
        for i, n in enumerate(nodes):
            names.append(f"{p:03d}-{i:05d}")  # in name order, as Cluster.build keeps nodes: indices hold
            units.append(n)
            models.append(pool)
        pools.append(Pool(pool, tuple(range(first, len(names)))))
    cluster = Cluster.build(
        names, [NODE_CPU_MILLI] * len(names), [NODE_MEMORY_MIB] * len(names), units, models
    )
    queue_index = {q.name: i for i, q in enumerate(seed.queues)}
    arrival = [0.0 if e.pool else STEP_S * (k + 1) for k, e in enumerate(seed.entries)]
    after = STEP_S * (len(seed.entries) + 1)  # later work keeps behind the seeded order
    arrival += [after + t for t, _ in later]
    entries = [*seed.entries, *(e for _, e in later)]
    workload = Workload.build([1] * len(entries), [1] * len(entries), [e.units for e in entries],
                              [MILLI] * len(entries), ["|".join(e.pools) for e in entries])  # fmt: skip
    jobs = Jobs(
        arrival=np.array(arrival),
        duration=np.maximum(np.array(durations, dtype=np.float64), 1e-3),
        pods=np.array([e.pods for e in entries], dtype=np.int64),
        queue=np.array([queue_index[e.queue] for e in entries], dtype=np.int64),
        priority=np.array([e.priority for e in entries], dtype=np.int64),
        workload=workload,
    )
    settings = seed.settings
    return World(
        cluster, tuple(pools), seed.queues, jobs, type(settings)(**{**vars(settings), "seed": seed_value})
    )


def hinted(entries: Sequence[Entry]) -> list[float]:
    """The whole runs the team's own jobs announce by their duration hints (what a hinted job has run plus what
    it has left): with no finished job to learn from, the team's best knowledge of how long jobs run here."""
    return [e.remaining.known + e.remaining.elapsed for e in entries
            if e.remaining.source == "hint" and e.remaining.known is not None]  # fmt: skip


def _draws(entries: Sequence[Entry], history: Sequence[Finished], rng: np.random.Generator) -> list[float]:
    prior = hinted(entries) if not history else []
    lag = holding_lag(history)
    out = []
    for e in entries:
        durations, _ = history_for(history, e.pool or (e.pools[0] if len(e.pools) == 1 else ""), e.gpus)
        out.append(draw(e.remaining, durations or prior, rng, lag))
    return out


def arrivals(streams: Sequence[Stream], history: Sequence[Finished], prior: Sequence[float],
             rng: np.random.Generator) -> list[tuple[float, Entry, float]]:  # fmt: skip
    """One run's later submissions, in arrival order: (seconds from now, entry, its run), each stream's
    Poisson arrivals over its horizon (at most MAX_ARRIVALS), each a shape of the stream drawn at
    random, its run its hint or deadline, else drawn as an unknown one of its pool and GPUs."""
    out = []
    lag = holding_lag(history)
    for stream in streams:
        t = 0.0
        for n in range(MAX_ARRIVALS):
            t += float(rng.exponential(1.0 / stream.rate_per_s))
            if t > stream.horizon_s:
                break
            s = stream.shapes[int(rng.integers(len(stream.shapes)))]
            durations, _ = history_for(history, s.pools[0] if len(s.pools) == 1 else "", s.pods * s.units)
            run = draw(s.remaining, durations or prior, rng, lag)
            out.append((t, Entry(f"{LATER}/{stream.name}/{n}", s.queue, s.pools, s.pods, s.units, s.priority,
                                 s.remaining), run))  # fmt: skip
    return sorted(out, key=lambda a: a[0])


def pins(seed: Seed) -> dict[int, list[int]]:
    """The world's node indices (``world_of``'s order) each admitted entry's pods are bound to, by entry, where
    the seed read them (``Entry.nodes``, the full view with nodes)."""
    index = {}
    for pool, names in seed.node_names.items():
        first = sum(len(n) for p, n in sorted(seed.pools.items()) if p < pool)
        index.update({(pool, name): first + i for i, name in enumerate(names)})
    return {k: [index[(e.pool, n)] for n in e.nodes] for k, e in enumerate(seed.entries)
            if e.nodes and all((e.pool, n) in index for n in e.nodes)}  # fmt: skip


class _UntilStarted(Simulation):
    """A run that stops once job `target` has started: later events cannot change its first start. A job
    running now whose nodes were read (`pinned`) is first placed where its pods are, so the free GPUs per node
    are the real ones; evicted and placed again, it goes where the policy puts it."""

    def __init__(self, world: World, target: int, pinned: dict[int, list[int]] | None = None) -> None:
        super().__init__(world)
        self.target = target
        self.pinned = dict(pinned or {})

    def _place_job(self, j: int, nodes: np.ndarray, t: float) -> bool:
        at = self.pinned.pop(j, None)
        if at is not None:
            job = self.jobs[j]
            ready = set(nodes.tolist())
            for node in at[len(job.placed) :]:
                if node not in ready or not self.placement.place_on(j, job.placed, node):
                    break  # no room there: the rest go where the policy puts them
                self.autoscaler.busy(node)
            self.pending[job.pool].ask(j, self._asked(j))  # what its pods left to place ask now
        return super()._place_job(j, nodes, t)

    def after_cycle(self, t: float) -> None:
        if self.jobs[self.target].first_start is not None:
            self.events.clear()


def start_in(seed: Seed, target: int, durations: Sequence[float], seed_value: int = 0,
             later: Sequence[tuple[float, Entry, float]] = ()) -> float | None:  # fmt: skip
    """Seconds from now until every pod of entry `target` runs, in one run with `later` submitted after the
    seeded work; None if it never starts."""
    world = world_of(seed, [*durations, *(run for _, _, run in later)], seed_value,
                     [(t, e) for t, e, _ in later])  # fmt: skip
    sim = _UntilStarted(world, target, pins(seed))
    sim.run()
    return sim.jobs[target].first_start


def estimate(seed: Seed, target: int, history: Sequence[Finished], runs: int = RUNS) -> Estimate:
    """p50 and p90 of the target's start over `runs` draws of the unknown remaining times (one run when none
    is unknown), with what the seeding and the draws assumed."""
    unknown = [e for e in seed.entries if e.remaining.known is None]
    runs = runs if unknown or seed.streams else 1
    prior = hinted(seed.entries) if not history else []
    starts: list[float] = []
    never = 0
    for r in range(runs):
        later = arrivals(seed.streams, history, prior, np.random.default_rng([r, 1]))
        found = start_in(seed, target, _draws(seed.entries, history, np.random.default_rng(r)), r, later)
        if found is None:
            never += 1
        else:
            starts.append(found)
    values = np.array(starts + [np.inf] * never)
    p50, p90 = (float(np.percentile(values, q, method="inverted_cdf")) for q in (50, 90))
    return Estimate(
        None if math.isinf(p50) else p50,
        None if math.isinf(p90) else p90,
        runs,
        never,
        seed.assumed + tuple(said(seed, target, history)),
        seed.unseen,
    )


def said(seed: Seed, target: int, history: Sequence[Finished]) -> list[str]:
    """What the draws assumed, in the team's words: how many jobs' times came from hints, deadlines, history."""
    ahead = [e for i, e in enumerate(seed.entries) if i != target and not e.name.startswith(OTHERS + "/")]
    out = []
    for source, words in (("hint", "its gpufleet.io/expected-duration hint"),
                          ("deadline", "its activeDeadlineSeconds")):  # fmt: skip
        n = sum(1 for e in ahead if e.remaining.source == source)
        if n:
            out.append(f"{job_count(n)} of your team timed by {words}")
    blind = [e for e in ahead if e.remaining.source == "history"]
    running = sum(1 for e in blind if e.pool)
    kinds = " and ".join(k for k in (f"{running} running" if running else "",
                                     f"{len(blind) - running} waiting" if len(blind) > running else "") if k)  # fmt: skip
    noun = "job" if len(blind) == 1 else "jobs"
    prior = hinted(seed.entries) if not history else []
    if blind and prior:
        out.append(f"{kinds} {noun} without a duration hint, and your team has no finished job to learn from: "
                   f"the remaining time was drawn from your team's {job_count(len(prior))} with a hint "
                   f"(median {human_time(float(np.median(prior)))})")  # fmt: skip
    elif blind and not history:
        out.append(f"{kinds} {noun} without a duration hint, and your team has no finished job to learn from: "
                   f"each was taken to run {human_time(NO_HISTORY_S)} in all")  # fmt: skip
    elif blind:
        recent = [f.seconds for f in history][-HISTORY:]
        out.append(f"{kinds} {noun} without a duration hint: the remaining time was drawn from your team's last "
                   f"{len(recent)} finished jobs (median {human_time(float(np.median(recent)))}; the same pool and "
                   f"GPUs where {SIMILAR_AT_LEAST} or more)")  # fmt: skip
    lag = holding_lag(history)
    if lag > 0:
        out.append(f"a job with a duration hint was taken to hold its quota {human_time(lag)} beyond it, as your "
                   "team's finished jobs with a hint did (their median: pods started after admission, the end "
                   "seen after they finished)")  # fmt: skip
    # other teams' running work, modelled (the team's view): what it was taken to have left
    caught = any(e.remaining.source == CAUGHT for e in seed.entries)
    if not history and prior and caught:
        out.append(f"with no finished job of your team to learn from, other teams' running work was taken to "
                   f"be partway through runs as long as your team's {job_count(len(prior))} with a hint "
                   f"(median {human_time(float(np.median(prior)))})")  # fmt: skip
    elif not history and caught:
        out.append(f"with no finished job of your team to learn from, other teams' running work was taken to "
                   f"be partway through runs of {human_time(NO_HISTORY_S)}")  # fmt: skip
    return out
