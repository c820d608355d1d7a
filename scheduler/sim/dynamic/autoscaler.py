"""Which nodes are up: the autoscaler adding nodes for pods that find no room and removing empty ones.

- **Scale-up**: with `autoscale`, a pool starts at `min_nodes`; pods that find no room make it add nodes
  (enough for the pending units, up to the pool's nodes), each Ready after the pool's provisioning delay.
- **Scale-down, cluster-autoscaler's node groups**: a node empty for its group's unneeded time (the stack's
  `--scale-down-unneeded-time`, or the group's `autoscaling-options` override, `World.unneeded_s`) is removed
  while the pool is above `min_nodes` (cluster-autoscaler 1.35.2 core/scaledown/eligibility/eligibility.go,
  unneeded for `--scale-down-unneeded-time`), but never within `--scale-down-delay-after-add` of the last
  scale-up anywhere (core/static_autoscaler.go `isScaleDownInCooldown`; the start counts as a scale-up).
- **Karpenter's NodePools**: an empty node is consolidated once no pod has come or gone on it for the pool's
  `consolidateAfter` (karpenter v1.14.1 pkg/controllers/nodeclaim/disruption/consolidation.go marks it
  Consolidatable from its last pod event; pkg/controllers/disruption/emptiness.go deletes Consolidatable empty
  nodes); `Never` keeps them. No cool-down after a scale-up applies.
- **Capacity blocks** (`Pool.window`): nodes come only inside the window, are never removed within it, and
  all go when it ends.

Without `autoscale` every node of every pool is Ready from the start and stays. The engine owns the clock: it
schedules the node-Ready and idle-check events this module's decisions call for.
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.dynamic.model import World


class Autoscaler:
    """Each node's readiness (Ready, provisioning, empty since when) and the scale-up and scale-down rules.

    A node whose readiness changes is logged in ``changed`` (the placement's log of nodes to score again);
    ``ready_version`` bumps with it, so lists of Ready nodes are recomputed only when readiness changed."""

    def __init__(self, world: World, node_pool: np.ndarray, changed: list[int]) -> None:
        size = world.cluster.size
        self.w = world
        self.node_pool = node_pool
        self.changed = changed
        self.members = [np.array(p.nodes, dtype=np.int64) for p in world.pools]  # each pool's nodes
        self.gpus_per_node = [world.gpus_per_node(p) for p in world.pools]
        self.ready = np.zeros(size, dtype=bool)
        self.provisioning = np.zeros(size, dtype=bool)
        self.empty_since = np.full(size, -1.0)
        self.ready_version = 0  # bumps whenever `ready` or `provisioning` changes
        # cluster-autoscaler's last scale-up (its start counts as one); Karpenter's pools do not move it
        self.last_scale_up = 0.0
        self._ready_nodes: dict[int, tuple[int, np.ndarray]] = {}
        for pool in world.pools:
            up = pool.nodes if not world.settings.autoscale else pool.nodes[: pool.min_nodes]
            self.ready[list(up)] = True
            self.empty_since[list(up)] = 0.0

    def ready_in(self, p: int) -> np.ndarray:
        """The Ready nodes of pool ``p``, in index order (recomputed only when readiness changed)."""
        hit = self._ready_nodes.get(p)
        if hit is None or hit[0] != self.ready_version:
            hit = (self.ready_version, np.flatnonzero(self.ready & (self.node_pool == p)))
            self._ready_nodes[p] = hit
        return hit[1]

    def node_changed(self, node: int) -> None:
        """A node became Ready, provisioning or was removed: cached scores and ready lists are out of date."""
        self.changed.append(node)
        self.ready_version += 1

    def can_add(self, p: int, t: float) -> bool:
        """Pool ``p`` may get nodes at ``t``: it autoscales and, for a capacity block, its window is open."""
        window = self.w.pools[p].window
        return self.w.settings.autoscale and (window is None or window[0] <= t < window[1])

    def absent(self, p: int) -> np.ndarray:
        """Pool ``p``'s nodes that are neither Ready nor provisioning, in index order."""
        members = self.members[p]
        return members[~self.ready[members] & ~self.provisioning[members]]

    def scale_up(self, p: int, want: int, t: float) -> list[int]:
        """Nodes of pool ``p`` to start provisioning for ``want`` pending units: enough nodes for them, less those
        already coming, among the pool's nodes that are neither Ready nor provisioning."""
        per_node = self.gpus_per_node[p] * self.w.pools[p].units_per_gpu
        if per_node == 0 or not self.can_add(p, t):
            return []
        coming = int(self.provisioning[self.members[p]].sum())
        return self.add(p, -(-want // per_node) - coming, t)

    def add(self, p: int, count: int, t: float) -> list[int]:
        """Start provisioning ``count`` absent nodes of pool ``p`` (fewer if it has fewer)."""
        if count <= 0:
            return []
        free = self.absent(p)[:count].tolist()
        for n in free:
            self.provisioning[n] = True
            self.node_changed(n)
        if free and not self.w.pools[p].karpenter:
            self.last_scale_up = t
        return free

    def node_ready(self, node: int, t: float) -> bool:
        """A provisioning node turns Ready at ``t`` (empty); False if it was not provisioning."""
        if not self.provisioning[node]:
            return False
        self.provisioning[node] = False
        self.ready[node] = True
        self.node_changed(node)
        self.empty_since[node] = t
        return True

    def busy(self, node: int) -> None:
        """A pod was placed on ``node``: it is no longer empty."""
        self.empty_since[node] = -1.0

    def emptied(self, node: int, t: float) -> bool:
        """``node``'s last pod left at ``t``: a Ready node counts as empty from then (True: check it later)."""
        if not self.ready[node]:
            return False
        self.empty_since[node] = t
        return True

    def idle_check(self, node: int, t: float) -> float | None:
        """Remove ``node`` if it has been empty for its pool's unneeded time and its pool is above `min_nodes`;
        return when to look again if only cluster-autoscaler's cool-down after a scale-up kept it."""
        since = self.empty_since[node]
        p = int(self.node_pool[node])
        pool = self.w.pools[p]
        if not self.ready[node] or since < 0 or t - since < self.w.unneeded_s(pool) or pool.window:
            return None
        members = self.members[p]
        if int(self.ready[members].sum()) <= pool.min_nodes:
            return None
        cooled = self.last_scale_up + self.w.settings.scale_down_delay_after_add_s
        if not pool.karpenter and t < cooled:
            return cooled
        self.remove(node)
        return None

    def remove(self, node: int) -> None:
        """``node`` leaves (scaled down, or its capacity block ended)."""
        self.ready[node] = False
        self.provisioning[node] = False
        self.empty_since[node] = -1.0
        self.node_changed(node)
