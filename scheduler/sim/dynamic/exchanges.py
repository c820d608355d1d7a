"""Two queues that take a pool from each other: the pairs of ClusterQueues whose jobs evicted each other's in
the same pool, both ways, at least :data:`AT_LEAST` times each.

Reclaim goes one way: a queue takes back its quota from a borrower, and the borrower waits. Borrowers whose
shares cross as jobs start and end elsewhere also evict each other now and then, both ways. An exchange is
different: under Kueue's default fair-sharing strategies `[LessThanOrEqualToFinalShare,
LessThanInitialShare]`, two borrowers whose dominant shares are equal and set by another pool each satisfy
`preemptorNewShare <= targetNewShare` against the other, so each requeued job evicts the job that evicted it,
at the pace of Kueue's requeue, for as long as the pool's jobs run (docs/simulation.md).

Why 100 each way: an exchange answers every eviction, so it passes 100 each way within minutes (two jobs
taking turns for the 290 s of the twin's two-pool world: 145 each way) and reaches thousands in a long run.
On example-prod (openb default at time scale 0.01, MostAllocated with autoscaling, a run of about 123 hours)
it names, at seed 42, llm-training and inference in `a10g-batch` (28,011 and 27,278) and three more pairs
(207 to 1,163 each way), at seed 43 the same A10G pair (23,378 and 23,265) and two more (310 to 399); with
`[LessThanInitialShare]`, where no exchange is possible, each of these falls below 40 one way but for the A10G
pair at seed 43 (229 and 127). Borrowers trading a pool as their shares cross can pass 100 too in a run that
long: with the strict strategy one pair does at each seed (research and inference 347 and 124 at seed 42,
llm-training and inference 229 and 127 at seed 43), named without a remedy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.sim.dynamic.report import QueuePreemptions

AT_LEAST = 100  # preemptions each way for two queues to be named as evicting each other


@dataclass(frozen=True)
class Exchange:
    """Two queues whose jobs evicted each other's in ``pool``: ``first`` is the one that evicted more."""

    pool: str
    first: str
    second: str
    first_evicted: int  # times a job of ``first`` evicted one of ``second``
    second_evicted: int  # and the other way


def exchanges(counts: Iterable[QueuePreemptions], at_least: int = AT_LEAST) -> tuple[Exchange, ...]:
    """Every pair of distinct queues that evicted each other in the same pool at least ``at_least`` times each
    way, in pool order and by the most evictions first (a queue evicting its own jobs is not an exchange)."""
    seen = {(c.pool, c.preemptor, c.victim): c.count for c in counts if c.preemptor != c.victim}
    found: list[Exchange] = []
    for (pool, a, b), ab in seen.items():
        ba = seen.get((pool, b, a), 0)
        if min(ab, ba) >= at_least and (ab, b) > (ba, a):  # each pair once: the one that evicted more first
            found.append(Exchange(pool, a, b, ab, ba))
    pools = list(dict.fromkeys(c[0] for c in seen))
    return tuple(sorted(found, key=lambda e: (pools.index(e.pool), -e.first_evicted - e.second_evicted)))
