"""Where an admitted job's pods go: the pools that can host a job at all, node scores, placing pods one by one.

- **Placement**: each pod goes to the ready node of its admitted pool the placement policy scores highest
  (the same policies and scoring code as the placement replay, ``scheduler.sim.policies``).

Scores are kept per pod shape over the whole cluster and recomputed only for nodes that changed since (a
policy scores each node on its own state, as the placement replay's score matrix relies on too). For a policy
that takes the highest score, each (pod shape, pool) also keeps its feasible nodes in a heap by (score, node
index), fed from the pool's changed nodes, so a pod's node is found without looking at the rest of the pool.
"""

from __future__ import annotations

import heapq

import numpy as np

from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.model import MILLI
from scheduler.fgd.shapes import build_shapes, target_workload
from scheduler.fgd.state import ClusterState
from scheduler.sim.dynamic.model import World
from scheduler.sim.policies import Context, Policy, make_policy
from scheduler.sim.policies.base import feasible, least_free_fitting_gpu_of, score_nodes

FEW = 16  # changed nodes up to this many are tested for fit in Python, more with numpy


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


class Ceiling:
    """Per pool, the most whole GPUs free on one node and the most free of one GPU (milli), over the pool's nodes,
    Ready or not: a pod asking more than that fits no node of the pool, and is told so without scoring any.

    Under load most pods tried find no room (the pool's room grew by a release elsewhere), and these two counts
    answer nearly all of them. Counted over every node of the pool, not only the Ready ones, they are an upper
    bound that never turns a pod away that a Ready node could take."""

    def __init__(self, state: ClusterState, node_pool: np.ndarray, n_pools: int) -> None:
        self.state = state
        self.node_pool: list[int] = node_pool.tolist()
        # per node its (GPUs with nothing taken, the most free of one GPU); per pool the top of each
        self.counts: list[tuple[int, int]] = [(0, 0)] * len(self.node_pool)
        self.whole = [_Top() for _ in range(n_pools)]
        self.most = [_Top() for _ in range(n_pools)]
        for node, p in enumerate(self.node_pool):
            if p >= 0:
                w, m = self.counts[node] = self._of(node)
                self.whole[p].add(w)
                self.most[p].add(m)

    def _of(self, node: int) -> tuple[int, int]:
        row = self.state.free_gpu[node].tolist()
        return sum(1 for x in row if x >= MILLI), max(row, default=0)

    def update(self, node: int) -> None:
        """``node``'s GPUs changed."""
        p = self.node_pool[node]
        if p < 0:
            return
        (was_w, was_m), (w, m) = self.counts[node], self._of(node)
        self.counts[node] = (w, m)
        self.whole[p].move(was_w, w)
        self.most[p].move(was_m, m)

    def may_fit(self, p: int, gpus: int, milli: int) -> bool:
        """Whether a node of pool ``p`` may have ``gpus`` GPUs with ``milli`` free each (a share: one GPU)."""
        if milli >= MILLI:
            return self.whole[p].top >= gpus
        return self.most[p].top >= milli


class _Top:
    """The largest of a multiset of counts (one per node), kept as nodes move between counts."""

    __slots__ = ("nodes", "top")

    def __init__(self) -> None:
        self.nodes: dict[int, int] = {}  # count -> nodes at it
        self.top = 0

    def add(self, value: int) -> None:
        self.nodes[value] = self.nodes.get(value, 0) + 1
        self.top = max(self.top, value)

    def move(self, was: int, value: int) -> None:
        """A node's count went from ``was`` to ``value``."""
        if value == was:
            return
        nodes = self.nodes
        left = nodes[was] - 1
        if left:
            nodes[was] = left
        else:
            del nodes[was]
        nodes[value] = nodes.get(value, 0) + 1
        if value > self.top:
            self.top = value
        elif was == self.top and not left:  # the last node at the top went down
            self.top = max(nodes)


class Placement:
    """The cluster's live allocation, the placement policy, and each pod shape's scores kept up to date."""

    def __init__(self, world: World, node_pool: np.ndarray) -> None:
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
        self.is_share = self.shapes.is_share.tolist()
        self.node_pool = node_pool  # each node's pool index (-1: none), the engine's
        # ``changed`` split by pool (up to ``_split``), for the heaps below
        self.pool_changed: list[list[int]] = [[] for _ in world.pools]
        self._pool_size = [len(pool.nodes) for pool in world.pools]
        self._pods: list[int] = jobs.pods.tolist()  # per job, as Python ints (read per pod placed)
        self._pod_shape: list[int] = self.shapes.pod_shape.tolist()
        self._split = 0
        self.heaps: dict[tuple[int, int], _Best] = {}
        self._member_sets: dict[int, tuple[np.ndarray, frozenset[int]]] = {}
        self.ceiling = Ceiling(self.state, node_pool, len(world.pools))

    def place(self, j: int, placed: list[tuple[int, list[int]]], p: int, nodes: np.ndarray) -> bool:
        """Place job ``j``'s pods not yet in ``placed`` on ``nodes`` (the Ready nodes of pool ``p``, ascending),
        one by one, each on the node the policy chooses, while one fits; each placed pod is added to
        ``placed``. True when it stopped because no node of ``nodes`` has room for the next pod (not because
        the policy declined one that has)."""
        s = self._pod_shape[j]
        share = self.is_share[s]
        _, _, k, d = self.shapes.requests[s]
        while len(placed) < self._pods[j] and len(nodes):
            if self.plain_choice:  # the highest score, the first node of ``nodes`` among equals
                if k and not self.ceiling.may_fit(p, k, d):  # no node of the pool has the GPUs free
                    return True
                node = self.best(s, p, nodes, share)
                if node < 0:
                    return True
                gpu = self.score_cache[s][1]
            else:
                score, gpu = self.scores(s, nodes, share)
                # these policies choose over the whole cluster's column (RoundRobin keeps its turn by node index)
                column = np.full(self.w.cluster.size, -1, dtype=np.int64)
                column[nodes] = score[nodes]
                node = self.policy.choose_node(column, s)
                if node < 0:
                    return not bool((column >= 0).any())
            self._allocate(s, node, int(gpu[node]), placed)
        return len(placed) < self._pods[j]

    def place_on(self, j: int, placed: list[tuple[int, list[int]]], node: int) -> bool:
        """Place one more of job ``j``'s pods on ``node``, chosen beforehand (where a pod running now is bound),
        not by the policy; False when it does not fit there."""
        s = self._pod_shape[j]
        score, gpu = self.scores(s, np.array([node], dtype=np.int64), self.is_share[s])
        if score[node] < 0:
            return False
        self._allocate(s, node, int(gpu[node]), placed)
        return True

    def _allocate(self, s: int, node: int, share_gpu: int, placed: list[tuple[int, list[int]]]) -> None:
        """A pod of shape ``s`` onto ``node``: its GPUs as the policy picks them, the node logged as changed."""
        cpu, mem, milli = int(self.shapes.cpu[s]), int(self.shapes.mem[s]), int(self.shapes.gpu_milli[s])
        gpus = self.policy.choose_gpus(node, s, share_gpu)
        self.state.allocate(node, cpu, mem, gpus, milli)
        self.ceiling.update(node)
        self.policy.placed(node, s)
        if self.policy.live_frag:
            self.frag.update(node)
        self.changed.append(node)
        placed.append((node, gpus))

    def release(self, j: int, placed: list[tuple[int, list[int]]]) -> list[int]:
        """Free what job ``j``'s ``placed`` pods hold; return the nodes left without pods, in that order."""
        s = self._pod_shape[j]
        cpu, mem = int(self.shapes.cpu[s]), int(self.shapes.mem[s])
        milli = int(self.shapes.gpu_milli[s])
        emptied = []
        for node, gpus in placed:
            self.state.release(node, cpu, mem, gpus, milli)
            self.ceiling.update(node)
            if self.policy.live_frag:
                self.frag.update(node)
            self.changed.append(node)
            if self.state.pods[node] == 0:
                emptied.append(node)
        return emptied

    def best(self, s: int, p: int, nodes: np.ndarray, share: bool) -> int:
        """The node of ``nodes`` (the Ready nodes of pool ``p``, ascending) with shape ``s``'s highest score, the
        lowest index among equals (as ``argmax`` over ``nodes`` picks), or -1 when none fits.

        The (shape, pool) heap holds (-score, node) for feasible nodes; the pool's nodes changed since it last
        looked are scored again and pushed (a node turning Ready is among them); an entry whose score is no
        longer the node's, or whose node is no longer Ready, is dropped when it comes to the top."""
        log = self._changed_in(p)
        kept = self.heaps.get((s, p))
        if kept is None:
            score, _ = self.scores(s, nodes, share)
            kept = _Best(nodes, self._members(p, nodes), self._entries(score, nodes), len(log))
            self.heaps[(s, p)] = kept
        elif kept.nodes is not nodes:
            # readiness changed: a node that left fails the test at the top, one that came is among the changed
            kept.nodes, kept.members = nodes, self._members(p, nodes)
        if kept.seen < len(log):
            members = kept.members
            if len(members) == self._pool_size[p]:  # every node of the pool is Ready: all of its log is
                touched = sorted(set(log[kept.seen :]))
            else:
                touched = sorted(
                    {n for n in log[kept.seen :] if n in members}
                )  # the changed nodes of ``nodes``
            kept.seen = len(log)
            if touched:
                for node, got in zip(touched, self._rescore(s, touched, share), strict=True):
                    if got >= 0:
                        heapq.heappush(kept.heap, (-got, node))
                if len(kept.heap) > 2 * len(nodes) + 64:  # mostly dropped entries: keep the live ones
                    kept.heap = self._entries(self.score_cache[s][0], nodes)
        heap, members = kept.heap, kept.members
        score = self.score_cache[s][0]
        while heap:
            neg, node = heap[0]
            if node in members and score[node] == -neg:
                return node
            heapq.heappop(heap)
        return -1

    def _rescore(self, s: int, nodes: list[int], share: bool) -> list[int]:
        """Score shape ``s`` again on ``nodes`` (changed since their last scoring) into its kept scores; return
        their scores in order (-1 where the shape does not fit, without asking the policy). Their stale marks
        are left: a later :meth:`scores` over them only scores them again alike."""
        score, gpu, _, _ = self.score_cache[s]
        fit = self.fits(s, nodes)
        out = [-1] * len(nodes)
        for node, ok in zip(nodes, fit, strict=True):
            if not ok:
                score[node] = -1  # what scoring it would give; most pods that find no room find it here
        at = [i for i, ok in enumerate(fit) if ok]
        few = self.policy.score_few(s, [nodes[i] for i in at]) if at and len(at) <= FEW else None
        if few is not None:
            _, _, _, d = self.shapes.requests[s]
            free_gpu = self.state.free_gpu
            pick = share and self.policy.uses_share_gpu  # the least-free fitting GPU, as score_nodes picks
            for i, value in zip(at, few, strict=True):
                node = nodes[i]
                score[node] = out[i] = value
                gpu[node] = least_free_fitting_gpu_of(free_gpu[node].tolist(), d) if pick else 0
        elif at:
            some = np.array([nodes[i] for i in at], dtype=np.int64)
            got, share_gpu = score_nodes(self.policy, s, some, self.static, share)
            score[some] = got
            gpu[some] = share_gpu if share_gpu is not None else 0
            for i, value in zip(at, score[some].tolist(), strict=True):
                out[i] = value
        return out

    def fits(self, s: int, nodes: list[int]) -> list[bool]:
        """Which of ``nodes`` shape ``s`` fits on now: :func:`feasible`'s test node by node in Python, since the
        nodes changed between two looks at a pool are a few and numpy's cost per call would dominate."""
        if len(nodes) > FEW:
            return feasible(self.state, self.shapes, s, np.array(nodes, dtype=np.int64)).tolist()
        cpu, mem, k, d = self.shapes.requests[s]
        res, free_gpu = self.state.free_res, self.state.free_gpu
        allowed = self.shapes.node_ok[s] if self.shapes.restricted[s] else None
        out = []
        for node in nodes:
            free_cpu, free_mem, _ = res[node].tolist()
            ok = free_cpu >= cpu and free_mem >= mem and (allowed is None or bool(allowed[node]))
            if ok and k:
                ok = sum(1 for x in free_gpu[node].tolist() if x >= d) >= k
            out.append(ok)
        return out

    @staticmethod
    def _entries(score: np.ndarray, nodes: np.ndarray) -> list[tuple[int, int]]:
        """A heap of (-score, node) over the feasible ones of ``nodes``."""
        among = score[nodes]
        fit = among >= 0
        heap = list(zip((-among[fit]).tolist(), nodes[fit].tolist(), strict=True))
        heapq.heapify(heap)
        return heap

    def _members(self, p: int, nodes: np.ndarray) -> frozenset[int]:
        """``nodes`` (pool ``p``'s Ready nodes) as a set, built once per set of Ready nodes."""
        hit = self._member_sets.get(p)
        if hit is None or hit[0] is not nodes:
            hit = (nodes, frozenset(nodes.tolist()))
            self._member_sets[p] = hit
        return hit[1]

    def _changed_in(self, p: int) -> list[int]:
        """Pool ``p``'s entries of ``changed``, in order (``changed`` is split by pool as far as it goes)."""
        changed = self.changed
        if self._split < len(changed):
            new = changed[self._split :]
            logs = self.pool_changed
            for node, pool in zip(new, self.node_pool[new].tolist(), strict=True):
                if pool >= 0:
                    logs[pool].append(node)
            self._split = len(changed)
        return self.pool_changed[p]

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


class _Best:
    """A (pod shape, pool) heap: the Ready nodes it was built over (as an array and a set), (-score, node)
    entries, and how far into the pool's changed nodes it has looked."""

    __slots__ = ("heap", "members", "nodes", "seen")

    def __init__(
        self, nodes: np.ndarray, members: frozenset[int], heap: list[tuple[int, int]], seen: int
    ) -> None:
        self.nodes, self.members, self.heap, self.seen = nodes, members, heap, seen
