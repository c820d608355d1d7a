"""The approaches a stack's queues are compared with over time, registered by name, and the comparison run.

Each alternative is one function that turns the stack's :class:`World` into the world under the approach
(its queues, jobs and settings; the cluster stays), registered with :func:`register` the way placement
policies are (``scheduler.sim.policies.base.register``). :func:`run_comparison` runs every registered
approach with the autoscaler and without; adding an approach is one registered function.

The rows, in the comparison's order:

- **The null model** (``null-fifo``): the static partitions below served first come, first served, no
  borrowing, no priorities, no preemption. Anything that claims to schedule well must beat it.
- **The naive answers, as the people who give them mean them**: round-robin over nodes that ignores load;
  every job on one node group of the same total GPUs; the lowest-power GPU first (with each GPU's speed,
  so slow GPUs cost time).
- **The best versions people actually run**: one BestEffortFIFO queue for everyone; static partitions, each
  team its quota in GPUs and only the work its partition can run; the cheapest GPU first.
- **The stack**: its own queues under MostAllocated or fragmentation-aware placement.

Every row keeps the stack's trace, GPU speeds and autoscaler; what a row changes is named in its description.
A row that keeps the stack's queues keeps their ProvisioningRequest admission check; the rows that replace the
queues (one node group, one queue for everyone) have none, as a cluster set up without the stack has none.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from scheduler.fgd.model import MILLI, Cluster
from scheduler.sim.dynamic.engine import simulate
from scheduler.sim.dynamic.model import Queue, World
from scheduler.sim.dynamic.report import Result
from scheduler.sim.dynamic.routing import able_queues

Transform = Callable[[World], World]


@dataclass(frozen=True)
class Alternative:
    name: str
    description: str  # one line for the report's list of approaches
    transform: Transform  # the stack's world (autoscaling already set) -> the world under this approach
    plotted: bool = False  # drawn over time beside the stack's own approach


REGISTRY: dict[str, Alternative] = {}


def register(name: str, description: str, plotted: bool = False) -> Callable[[Transform], Transform]:
    """Decorator: make a World -> World transform an approach of the comparison, by ``name``."""

    def add(transform: Transform) -> Transform:
        if not name or name in REGISTRY:
            raise ValueError(f"alternative name {name!r} missing or already registered")
        REGISTRY[name] = Alternative(name, description, transform, plotted)
        return transform

    return add


def names() -> tuple[str, ...]:
    """Every registered approach, in the order registered (the comparison's row order)."""
    return tuple(REGISTRY)


def alternative(world: World, name: str, autoscale: bool) -> World:
    """``world`` under the approach ``name``, with the autoscaler or with every node up."""
    chosen = REGISTRY.get(name)
    if chosen is None:
        raise ValueError(f"unknown alternative {name!r}; choose from {', '.join(REGISTRY)}")
    return chosen.transform(replace(world, settings=replace(world.settings, autoscale=autoscale)))


def run_comparison(
    world: World,
    approaches: tuple[str, ...] | None = None,
    on_done: Callable[[str, bool, Result], None] | None = None,
) -> dict[tuple[str, bool], Result]:
    """Every approach (default: all registered) with and without autoscaling; each result's ``seconds`` is its
    wall time and its ``label`` the approach."""
    results: dict[tuple[str, bool], Result] = {}
    for name in names() if approaches is None else approaches:
        for scaled in (True, False):
            start = time.perf_counter()
            result = simulate(alternative(world, name, scaled))
            result = replace(result, label=name, seconds=time.perf_counter() - start)
            results[(name, scaled)] = result
            if on_done is not None:
                on_done(name, scaled, result)
    return results


def _stack_placement(world: World) -> World:
    """The stack's own MostAllocated weights (or MostAllocated's defaults when the stack deploys FGD)."""
    s = world.settings
    params = s.policy_params if s.policy == "MostAllocated" else {}
    return replace(world, settings=replace(s, policy="MostAllocated", policy_params=params))


def team_gpus(world: World, queue: Queue) -> float:
    """A queue's nominal quota in GPUs, over every pool (units over units per GPU)."""
    per = {p.name: p.units_per_gpu for p in world.pools}
    return sum(n / per.get(f, 1) for f, n in queue.nominal.items())


@register(
    "null-fifo",
    "null model: static partitions served first come first served (StrictFIFO, no priorities), no "
    "borrowing, no preemption",
)
def null_fifo(world: World) -> World:
    queues = tuple(replace(q, borrowing_limit={f: 0 for f in q.flavors}) for q in world.queues)
    jobs = replace(
        world.jobs, queue=partition_teams(world), priority=np.zeros(world.jobs.size, dtype=np.int64)
    )
    world = _stack_placement(replace(world, queues=queues, jobs=jobs))
    s = replace(world.settings, strict_fifo=True, reclaim_within_cohort=False, preempt_lower_priority=False,
                borrow_within_cohort_max_priority=None)  # fmt: skip
    return replace(world, settings=s)


@register(
    "round-robin", "naive: the stack's queues, each pod on the next node in turn that fits (load ignored)"
)
def round_robin(world: World) -> World:
    return replace(world, settings=replace(world.settings, policy="RoundRobin", policy_params={}))


@register(
    "one-node-group",
    "naive: one node group of the stack's largest node type with the same total GPUs; every team's quota in "
    "GPUs there, a GPU share takes a whole GPU",
)
def one_node_group(world: World) -> World:
    biggest = max(world.pools, key=world.gpus_per_node)
    per_node = world.gpus_per_node(biggest)
    total = sum(len(p.nodes) * world.gpus_per_node(p) for p in world.pools)
    least = sum(p.min_nodes * world.gpus_per_node(p) for p in world.pools)
    count = math.ceil(total / per_node)
    first = biggest.nodes[0]
    c = world.cluster
    cluster = Cluster.build([f"{biggest.name}-{i:04d}" for i in range(count)], [int(c.cpu_milli[first])] * count,
                            [int(c.memory_mib[first])] * count, [per_node] * count,
                            [biggest.name] * count)  # fmt: skip
    # an ordinary group bought by the hour, scaled down after the stack's unneeded time, whatever the
    # largest pool was (a capacity block, a Karpenter pool)
    pool = replace(biggest, nodes=tuple(range(count)), units_per_gpu=1, min_nodes=math.ceil(least / per_node),
                   unneeded_s=None, karpenter=False, window=None)  # fmt: skip
    queues = tuple(
        replace(q, flavors=(pool.name,), nominal={pool.name: round(team_gpus(world, q))},
                borrowing_limit={pool.name: None}, lending_limit={}, checked=())
        for q in world.queues
    )  # fmt: skip
    wl = world.jobs.workload
    whole = replace(wl, gpu_milli=np.full(wl.size, MILLI, dtype=wl.gpu_milli.dtype),
                    gpu_spec=(pool.name,) * wl.size)  # fmt: skip
    world = replace(
        world, cluster=cluster, pools=(pool,), queues=queues, jobs=replace(world.jobs, workload=whole)
    )
    return _stack_placement(world)


@register(
    "lowest-power-first",
    "naive: the stack's queues, each team's pools tried lowest GPU power draw first (jobs run slower on "
    "slower GPUs)",
)
def lowest_power_first(world: World) -> World:
    watts = {p.name: p.gpu_power_w if p.gpu_power_w is not None else math.inf for p in world.pools}
    queues = tuple(replace(q, flavors=tuple(sorted(q.flavors, key=lambda f: watts[f]))) for q in world.queues)
    return _stack_placement(replace(world, queues=queues))


@register(
    "one-queue-besteffort", "best naive: one BestEffortFIFO queue for everyone over every pool", plotted=True
)
def one_queue_besteffort(world: World) -> World:
    pools = [p.name for p in world.pools]
    capacity = {p.name: world.capacity_units(p) for p in world.pools}
    one = Queue("everyone", tuple(pools), capacity, {p: 0 for p in pools})
    jobs = replace(world.jobs, queue=np.zeros(world.jobs.size, dtype=np.int64))
    world = replace(world, queues=(one,), jobs=jobs)
    return _stack_placement(replace(world, settings=replace(world.settings, strict_fifo=False)))


@register(
    "static-partitions",
    "best naive: each team its quota, no borrowing; a job goes to a team whose partition can run it, drawn by "
    "GPUs",
    plotted=True,
)
def static_partitions(world: World) -> World:
    queues = tuple(replace(q, borrowing_limit={f: 0 for f in q.flavors}) for q in world.queues)
    jobs = replace(world.jobs, queue=partition_teams(world))
    return _stack_placement(replace(world, queues=queues, jobs=jobs))


def partition_teams(world: World) -> np.ndarray:
    """Each job's team under static partitions: its own when that team has quota in a pool whose nodes can
    hold the job's pod, else one that has, drawn in proportion to the teams' GPUs (seeded): an administrator
    sends work to the partition with the hardware for it, so no job waits for ever on a partition that cannot
    run it. A job keeps its priority class."""
    rng = np.random.default_rng(world.settings.seed)
    gpus = np.array([team_gpus(world, q) for q in world.queues])
    able = able_queues(world)
    team = world.jobs.queue.copy()
    for j in range(world.jobs.size):
        mask = able(j)
        if mask[team[j]] or not mask.any():
            continue
        weights = np.where(mask, gpus, 0.0)
        team[j] = rng.choice(len(weights), p=weights / weights.sum()) if weights.sum() else int(mask.argmax())
    return team


@register(
    "cheapest-gpu-first", "best naive: the stack's queues, each team's pools tried cheapest GPU-hour first"
)
def cheapest_gpu_first(world: World) -> World:
    price = {
        p.name: (p.node_price_hour or 0.0) / max(world.gpus_per_node(p) * p.units_per_gpu, 1)
        for p in world.pools
    }
    queues = tuple(replace(q, flavors=tuple(sorted(q.flavors, key=lambda f: price[f]))) for q in world.queues)
    return _stack_placement(replace(world, queues=queues))


@register("kueue-mostallocated", "the stack's queues, MostAllocated placement")
def kueue_mostallocated(world: World) -> World:
    return _stack_placement(world)


@register("kueue-fragmentationaware", "the stack's queues, fragmentation-aware placement (FGD)")
def kueue_fragmentationaware(world: World) -> World:
    return replace(world, settings=replace(world.settings, policy="FGD", policy_params={}))
