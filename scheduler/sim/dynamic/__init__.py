"""The dynamic simulation: jobs over time through Kueue-style queues, placement and an autoscaler."""

from scheduler.sim.dynamic.engine import Simulation, simulate
from scheduler.sim.dynamic.model import Jobs, Pool, Queue, Settings, World
from scheduler.sim.dynamic.report import PoolResult, Result, TeamResult

__all__ = [
    "Jobs",
    "Pool",
    "PoolResult",
    "Queue",
    "Result",
    "Settings",
    "Simulation",
    "TeamResult",
    "World",
    "simulate",
]
