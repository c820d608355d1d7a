"""Which queues can run a job: a queue can when it holds quota (a nominal share) on a pool whose largest node
holds the job's pod. One rule for the two places that send a trace's jobs to queues: a team member choosing
between their team's LocalQueues (:func:`own_queue`), and an administrator sending work to a partition that
can run it (``scheduler.sim.dynamic.alternatives.partition_teams``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from scheduler.sim.dynamic.model import World


def able_queues(world: World) -> Callable[[int], np.ndarray]:
    """Per job, a mask over ``world.queues``: those holding quota on a pool that can hold the job's pod (its
    GPUs, CPU and memory on the pool's largest node, among the pools its ``gpu_spec`` allows)."""
    c, wl = world.cluster, world.jobs.workload
    biggest = {
        p.name: (int(c.num_gpu[list(p.nodes)].max()), int(c.cpu_milli[list(p.nodes)].max()),
                 int(c.memory_mib[list(p.nodes)].max()))
        for p in world.pools if p.nodes
    }  # fmt: skip
    owns = [{f for f, n in q.nominal.items() if n > 0} for q in world.queues]
    masks: dict[tuple[str, int, int, int], np.ndarray] = {}

    def able(j: int) -> np.ndarray:
        key = (wl.gpu_spec[j], int(wl.num_gpu[j]), int(wl.cpu_milli[j]), int(wl.memory_mib[j]))
        if key not in masks:
            hosts = {
                p for p in key[0].split("|")
                if p in biggest and all(need <= has for need, has in zip(key[1:], biggest[p], strict=True))
            }  # fmt: skip
            masks[key] = np.array([bool(hosts & o) for o in owns])
        return masks[key]

    return able


def own_queue(world: World, chosen: np.ndarray, other: Mapping[int, int]) -> np.ndarray:
    """Each job's queue as its team's member picks it: the queue it was given when that queue can run it, else
    the team's other queue (``other``: a team's default queue -> its topology queue) when that one can; a job
    whose queue was named (``chosen``) or that neither can run keeps its queue.

    Why: a trace without a `queue` column says nothing of the LocalQueue, and a team whose quota for some
    hardware sits only in its topology queue (the capacity block of a training team) submits that work there,
    not to a default queue that would borrow other teams' GPUs while its own stand idle."""
    able = able_queues(world)
    queue = world.jobs.queue.copy()
    for j in np.flatnonzero(~chosen).tolist():
        q = int(queue[j])
        alt = other.get(q)
        if alt is None:
            continue
        mask = able(j)
        if not mask[q] and mask[alt]:
            queue[j] = alt
    return queue
