"""Where an admitted job's pods go: the pools that can host a job at all, node scores, placing pods one by one.

- **Placement**: each pod goes to the ready node of its admitted pool the placement policy scores highest
  (the same policies and scoring code as the placement replay, ``scheduler.sim.policies``).

Scores are kept per pod shape over the whole cluster and recomputed only for nodes that changed since (a
policy scores each node on its own state, as the placement replay's score matrix relies on too).
"""

from __future__ import annotations

import numpy as np

from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.shapes import build_shapes, target_workload
from scheduler.fgd.state import ClusterState
from scheduler.sim.dynamic.model import World
from scheduler.sim.policies import Context, Policy, make_policy
from scheduler.sim.policies.base import score_nodes


def unhostable(world: World, allowed: list[list[int]], flavors: list[list[int]]) -> set[int]:
    """Drop from each job's pools (``allowed``, changed in place) those whose nodes cannot hold one of its pods
    even when empty; return the jobs left with none of their queue's ``flavors``.

    Kueue assigns a flavor by quota alone, so it would admit such a job there and its pods would stay
    Pending for ever (evicted and readmitted at every waitForPodsReady timeout, the autoscaler adding
    nodes that cannot take them). Those pools are not offered; jobs no pool can host are left out and
    counted, as the placement replay counts pods no node can host."""
    c, wl = world.cluster, world.jobs.workload
    out = set()
    cache: dict[tuple[int, int, int, int], bool] = {}
    for j in range(wl.size):
        kept = []
        for p in allowed[j]:
            key = (p, int(wl.cpu_milli[j]), int(wl.memory_mib[j]), int(wl.num_gpu[j]))
            if key not in cache:
                nodes = list(world.pools[p].nodes)
                cache[key] = bool(
                    (
                        (c.cpu_milli[nodes] >= key[1])
                        & (c.memory_mib[nodes] >= key[2])
                        & (c.num_gpu[nodes] >= key[3])
                    ).any()
                )
            if cache[key]:
                kept.append(p)
        allowed[j] = kept
        if not any(p in kept for p in flavors[int(world.jobs.queue[j])]):
            out.add(j)
    return out


class Placement:
    """The cluster's live allocation, the placement policy, and each pod shape's scores kept up to date."""

    def __init__(self, world: World) -> None:
        c, jobs = world.cluster, world.jobs
        self.w = world
        self.state = ClusterState(c)
        self.shapes = build_shapes(jobs.workload, c)
        frag = NodeFragmentation(
            self.state, target_workload(jobs.workload), self.shapes.node_model, sorted(set(c.gpu_model))
        )
        self.policy: Policy = make_policy(world.settings.policy, **world.settings.policy_params)
        rng = np.random.default_rng(world.settings.seed)
        self.policy.bind(Context(c, self.state, self.shapes, frag, rng, "policy", jobs.workload))
        self.frag = frag
        # The policy takes the highest score, the lowest node index among equals (``Policy.choose_node``): the
        # choice is made over the pool's nodes (ascending) instead of a whole-cluster column built per pod.
        self.plain_choice = type(self.policy).choose_node is Policy.choose_node
        self.static = np.column_stack((c.cpu_milli, c.memory_mib, c.num_gpu, self.shapes.node_model))
        # ``changed`` logs every node whose resources, policy state or readiness changed, each shape's cache
        # keeps its position in the log.
        self.changed: list[int] = []
        self.score_cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]] = {}

    def place(self, j: int, placed: list[tuple[int, list[int]]], nodes: np.ndarray) -> bool:
        """Place job ``j``'s pods not yet in ``placed`` on ``nodes`` (Ready, of its pool), one by one, each on
        the node the policy chooses, while one fits; each placed pod is added to ``placed``. True when it
        stopped because no node of ``nodes`` has room for the next pod (not because the policy declined
        one that has)."""
        s = int(self.shapes.pod_shape[j])
        cpu, mem = int(self.shapes.cpu[s]), int(self.shapes.mem[s])
        milli = int(self.shapes.gpu_milli[s])
        share = bool(self.shapes.is_share[s])
        while len(placed) < int(self.w.jobs.pods[j]) and len(nodes):
            score, gpu = self.scores(s, nodes, share)
            if self.plain_choice:  # the highest score, the first node of ``nodes`` among equals
                among = score[nodes]
                best = int(among.argmax())
                if among[best] < 0:
                    return True
                node = int(nodes[best])
            else:
                # these policies choose over the whole cluster's column (RoundRobin keeps its turn by node index)
                column = np.full(self.w.cluster.size, -1, dtype=np.int64)
                column[nodes] = score[nodes]
                node = self.policy.choose_node(column, s)
                if node < 0:
                    return not bool((column >= 0).any())
            gpus = self.policy.choose_gpus(node, s, int(gpu[node]))
            self.state.allocate(node, cpu, mem, gpus, milli)
            self.policy.placed(node, s)
            if self.policy.live_frag:
                self.frag.update(node)
            self.changed.append(node)
            placed.append((node, gpus))
        return len(placed) < int(self.w.jobs.pods[j])

    def release(self, j: int, placed: list[tuple[int, list[int]]]) -> list[int]:
        """Free what job ``j``'s ``placed`` pods hold; return the nodes left without pods, in that order."""
        s = int(self.shapes.pod_shape[j])
        cpu, mem = int(self.shapes.cpu[s]), int(self.shapes.mem[s])
        milli = int(self.shapes.gpu_milli[s])
        emptied = []
        for node, gpus in placed:
            self.state.release(node, cpu, mem, gpus, milli)
            if self.policy.live_frag:
                self.frag.update(node)
            self.changed.append(node)
            if self.state.pods[node] == 0:
                emptied.append(node)
        return emptied

    def scores(self, s: int, nodes: np.ndarray, share: bool) -> tuple[np.ndarray, np.ndarray]:
        """Shape ``s``'s scores (-1: infeasible) and sharing GPU choices (0 where none), indexed by node, up to
        date on ``nodes``: only nodes never scored or changed since their last scoring are scored again."""
        size = self.w.cluster.size
        cache = self.score_cache.get(s)
        if cache is None:
            cache = (
                np.full(size, -1, dtype=np.int64),
                np.zeros(size, dtype=np.int64),
                np.ones(size, dtype=bool),
                [0],
            )
            self.score_cache[s] = cache
        score, gpu, stale, seen = cache
        if seen[0] < len(self.changed):
            stale[self.changed[seen[0] :]] = True
            seen[0] = len(self.changed)
        todo = nodes[stale[nodes]]
        if len(todo):
            got, share_gpu = score_nodes(self.policy, s, todo, self.static, share)
            score[todo] = got
            gpu[todo] = share_gpu if share_gpu is not None else 0
            stale[todo] = False
        return score, gpu
