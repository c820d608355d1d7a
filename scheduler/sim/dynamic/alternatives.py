"""The approaches a stack's queues are compared with over time, registered by name, and the comparison run.

Each alternative is one function that turns the stack's :class:`World` into the world under the approach
(its queues, jobs and settings; the cluster stays), registered with :func:`register` the way placement
policies are (``scheduler.sim.policies.base.register``). :func:`run_comparison` runs every registered
approach with the autoscaler and without; adding an approach is one registered function.

The two `kueue-*` approaches are the stack's own queues under each placement; the others are what people
reach for first: one FIFO queue, one node group, the cheapest GPU first, quotas without borrowing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from scheduler.sim.dynamic.engine import simulate
from scheduler.sim.dynamic.model import Queue, World
from scheduler.sim.dynamic.report import Result

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


@register("fifo-roundrobin", "one FIFO queue for everyone, round-robin over nodes", plotted=True)
def fifo_roundrobin(world: World) -> World:
    pools = [p.name for p in world.pools]
    capacity = {p.name: world.capacity_units(p) for p in world.pools}
    one = Queue("everyone", tuple(pools), capacity, {p: 0 for p in pools})
    jobs = replace(world.jobs, queue=np.zeros(world.jobs.size, dtype=np.int64))
    s = replace(
        world.settings, policy="RoundRobin", policy_params={}, strict_fifo=True, preempt_lower_priority=False
    )
    return replace(world, queues=(one,), jobs=jobs, settings=s)


@register("one-node-group", "every job on the largest node group")
def one_node_group(world: World) -> World:
    biggest = max(world.pools, key=lambda p: len(p.nodes) * world.gpus_per_node(p))
    only = biggest.name
    queues = tuple(
        replace(q, flavors=(only,), nominal={only: sum(q.nominal.values())}, borrowing_limit={only: None})
        for q in world.queues
    )
    workload = replace(world.jobs.workload, gpu_spec=(only,) * world.jobs.workload.size)
    jobs = replace(world.jobs, workload=workload)
    settings = replace(world.settings, policy="MostAllocated", policy_params={})
    return replace(world, queues=queues, jobs=jobs, settings=settings)


@register("cheapest-gpu-first", "the stack's queues, cheapest GPU per hour first")
def cheapest_gpu_first(world: World) -> World:
    price = {
        p.name: (p.node_price_hour or 0.0) / max(world.gpus_per_node(p) * p.units_per_gpu, 1)
        for p in world.pools
    }
    queues = tuple(replace(q, flavors=tuple(sorted(q.flavors, key=lambda f: price[f]))) for q in world.queues)
    return replace(
        world, queues=queues, settings=replace(world.settings, policy="MostAllocated", policy_params={})
    )


@register("static-partitions", "the stack's quotas, no borrowing", plotted=True)
def static_partitions(world: World) -> World:
    queues = tuple(replace(q, borrowing_limit={f: 0 for f in q.flavors}) for q in world.queues)
    return replace(
        world, queues=queues, settings=replace(world.settings, policy="MostAllocated", policy_params={})
    )


@register("kueue-mostallocated", "the stack's queues, MostAllocated placement")
def kueue_mostallocated(world: World) -> World:
    s = world.settings  # the stack's own weights when it deploys MostAllocated
    params = s.policy_params if s.policy == "MostAllocated" else {}
    return replace(world, settings=replace(s, policy="MostAllocated", policy_params=params))


@register("kueue-fragmentationaware", "the stack's queues, fragmentation-aware placement (FGD)")
def kueue_fragmentationaware(world: World) -> World:
    return replace(world, settings=replace(world.settings, policy="FGD", policy_params={}))
