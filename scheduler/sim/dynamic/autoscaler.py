"""Which nodes are up: the autoscaler adding nodes for pods that find no room and removing empty ones.

- **Autoscaler**: with `autoscale`, a pool starts at `min_nodes`; pods that find no room make it add nodes
  (enough for the pending units, up to the pool's nodes), each Ready after the pool's provisioning delay; a
  node empty for `scale_down_unneeded_s` is removed while the pool is above `min_nodes`
  (cluster-autoscaler FAQ, "How does scale-down work?": unneeded for `--scale-down-unneeded-time`).

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

    def scale_up(self, p: int, want: int) -> list[int]:
        """Nodes of pool ``p`` to start provisioning for ``want`` pending units: enough nodes for them, less those
        already coming, among the pool's nodes that are neither Ready nor provisioning."""
        per_node = self.gpus_per_node[p] * self.w.pools[p].units_per_gpu
        if per_node == 0:
            return []
        members = self.members[p]
        coming = int(self.provisioning[members].sum())
        needed = -(-want // per_node) - coming
        if needed <= 0:
            return []
        free = members[~self.ready[members] & ~self.provisioning[members]][:needed].tolist()
        for n in free:
            self.provisioning[n] = True
            self.node_changed(n)
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

    def idle_check(self, node: int, t: float) -> None:
        """Remove ``node`` if it has been empty for `scale_down_unneeded_s` and its pool is above `min_nodes`."""
        since = self.empty_since[node]
        if not self.ready[node] or since < 0 or t - since < self.w.settings.scale_down_unneeded_s:
            return
        p = int(self.node_pool[node])
        pool = self.w.pools[p]
        members = self.members[p]
        if int(self.ready[members].sum()) <= pool.min_nodes:
            return
        self.ready[node] = False
        self.empty_since[node] = -1.0
        self.node_changed(node)
