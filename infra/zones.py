"""Which zones a pool's nodes may use: shared by the node-group builders, Karpenter and preflight.

A module of its own so the Karpenter facts and the spec rules (which import those facts) read the same rule.
"""

from __future__ import annotations

from infra.spec import ClusterSpec, NodePool


def one_zone_pool(pool: NodePool) -> bool:
    """Capacity blocks live in one zone; so do EFA pools' cluster placement groups (EC2 User Guide,
    "Placement groups": a cluster placement group is in a single Availability Zone)."""
    return pool.capacity_type == "CAPACITY_BLOCK" or pool.efa


def pool_zones(spec: ClusterSpec, pool: NodePool) -> tuple[str, ...]:
    """The zones a pool's nodes may use (its subnets): one zone, the pool's list, or the cluster's."""
    if one_zone_pool(pool) and pool.availability_zone:
        return (pool.availability_zone,)
    return tuple(pool.availability_zones or spec.availability_zones)
