"""What one dynamic run reports, per team and overall (how each number is measured:
:mod:`scheduler.sim.dynamic.recorder`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TeamResult:
    team: str
    jobs: int
    started: int
    wait_p50_s: float
    wait_p95_s: float
    wait_max_s: float
    gpu_hours: float  # GPU-hours run, preempted runs included
    share: float  # of all teams' GPU-hours
    weight_share: float  # the team's weight over all weights
    blocked_idle_gpu_hours: float
    preempted: int
    preempted_gpu_hours: float


@dataclass(frozen=True)
class PoolResult:
    pool: str
    runs: int  # runs started in the pool (a preempted job that runs again counts again)
    gpu_hours: float  # GPU-hours those runs ran
    utilisation_ready: float  # gpu_hours over the GPU-hours of the pool's Ready nodes
    # admissions to the pool evicted by waitForPodsReady: Kueue admitted them on quota while no Ready node of
    # the pool could hold every pod within the timeout
    ready_evictions: int


@dataclass(frozen=True)
class QueuePreemptions:
    """How often jobs of one ClusterQueue evicted jobs of another (or of their own) in one pool: counted both
    ways, these show two queues that take a pool from each other (:mod:`scheduler.sim.dynamic.exchanges`)."""

    pool: str
    preemptor: str  # the evicting job's queue
    victim: str  # the evicted job's queue
    count: int


@dataclass(frozen=True)
class Result:
    """One dynamic run. Times in seconds from the first arrival."""

    label: str
    makespan_s: float
    jobs: int
    started: int
    never_started: int
    unhostable: int  # jobs no node of their pools can host (left out)
    wait_p50_s: float
    wait_p95_s: float
    wait_max_s: float
    blocked_idle_gpu_hours: float
    blocked_policy_gpu_hours: float  # of blocked_idle: a Ready node could have run the pod
    blocked_fragmentation_gpu_hours: float  # of blocked_idle: no node could
    queued_mean_s: float  # every second a job was not running before its end, over all jobs
    queued_p95_s: float
    slowdown_mean: float  # bounded slowdown of finished jobs
    utilisation_ready: float  # allocated GPU-hours / GPU-hours of Ready nodes
    utilisation_max: float  # allocated GPU-hours / GPU-hours of every node at the pools' maximum
    gpu_hours: float
    preemptions: int
    preempted_gpu_hours: float
    ready_timeouts: int
    node_hours: float
    cost: float | None
    teams: tuple[TeamResult, ...]
    pools: tuple[PoolResult, ...]
    preempted_by: tuple[QueuePreemptions, ...]  # per pool and pair of queues, in pool and queue order
    timeline: dict[str, list[float]]  # t, allocated, ready GPUs, waiting jobs, waiting GPUs (downsampled)
    waits: dict[str, list[float]]  # per team, every started job's wait (for the distribution plot)
    seconds: float = 0.0  # wall time of the run

    def to_dict(self, waits: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not waits:
            del out["waits"]
        return out
