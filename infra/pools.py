"""Which pools are which: the system pool's node group, pool zones, and which pools Karpenter provisions; facts
that the spec rules, the builders, plan and preflight share.

Kept free of the AWS builders (and so of the spec rules), because the spec rules import it.
"""

from __future__ import annotations

from infra import catalog
from infra.spec import ClusterSpec, NodePool

SYSTEM_GROUP = "system"  # the system pool's node group name


def one_zone_pool(pool: NodePool) -> bool:
    """Capacity blocks live in one zone; so do EFA pools' cluster placement groups (EC2 User Guide,
    "Placement groups": a cluster placement group is in a single Availability Zone)."""
    return pool.capacity_type == "CAPACITY_BLOCK" or pool.efa


def pool_zones(spec: ClusterSpec, pool: NodePool) -> tuple[str, ...]:
    """The zones a pool's nodes may use (its subnets): one zone, the pool's list, or the cluster's."""
    if one_zone_pool(pool) and pool.availability_zone:
        return (pool.availability_zone,)
    return tuple(pool.availability_zones or spec.availability_zones)


CAPACITY_TYPES = {"ON_DEMAND": ["on-demand"], "SPOT": ["spot"], "CAPACITY_BLOCK": ["reserved"]}
MAX_ROLE_NAME = 64  # IAM role names
MAX_QUEUE_NAME = 80  # SQS queue names (the interruption queue is named after the cluster)


def uses_karpenter(spec: ClusterSpec) -> bool:
    return spec.platform == "aws" and spec.cluster.autoscaler == "karpenter"


def karpenter_managed(spec: ClusterSpec, pool: NodePool) -> bool:
    """Karpenter provisions the pool: whole GPUs only (shared GPUs stay on managed node groups)."""
    return uses_karpenter(spec) and pool.sharing.mode == "exclusive"


def karpenter_pools(spec: ClusterSpec) -> list[NodePool]:
    return [p for p in spec.node_pools if karpenter_managed(spec, p)]


def managed_node_group_spec(spec: ClusterSpec) -> ClusterSpec:
    """The spec the managed node groups are built from: every pool Karpenter does not provision."""
    return spec.model_copy(
        update={"node_pools": [p for p in spec.node_pools if not karpenter_managed(spec, p)]}
    )


def needs_cluster_autoscaler(spec: ClusterSpec) -> bool:
    """The cluster-autoscaler runs unless Karpenter provisions every GPU pool."""
    return not uses_karpenter(spec) or any(not karpenter_managed(spec, p) for p in spec.node_pools)


def allowed_instance_types(pool: NodePool) -> list[str]:
    """`instanceType` first, then the other `instanceTypes` (spec rules: same GPU model and count)."""
    return list(dict.fromkeys([t for t in [pool.instance_type, *(pool.instance_types or [])] if t]))


def capacity_types(pool: NodePool) -> list[str]:
    """The pool's `karpenter.capacityTypes`, or what its `capacityType` means; an On-Demand pool with a
    reservation id (an ODCR) uses the reservation first and falls back to On-Demand."""
    settings = pool.karpenter
    if settings and settings.capacity_types:
        return list(dict.fromkeys(settings.capacity_types))
    if pool.capacity_type == "ON_DEMAND" and pool.capacity_reservation_id:
        return ["reserved", "on-demand"]
    return list(CAPACITY_TYPES[pool.capacity_type])


def reserved(pool: NodePool) -> bool:
    return "reserved" in capacity_types(pool)


def only_reserved(pool: NodePool) -> bool:
    """Every node runs in the reservation (a capacity block): paid for whether used or not."""
    return capacity_types(pool) == ["reserved"]


def quota_demand(pool: NodePool) -> dict[str, int]:
    """vCPU quota code -> vCPUs at maxSize if every node were the largest allowed type, per bucket the pool
    can draw on: Spot, On-Demand, and On-Demand for an ODCR (its instances count against On-Demand limits);
    capacity blocks draw on none."""
    vcpus = (pool.max_size or 0) * max(catalog.CATALOG[t].vcpus for t in allowed_instance_types(pool))
    itype = catalog.CATALOG[pool.instance_type or ""]
    demand: dict[str, int] = {}
    for kind in capacity_types(pool):
        if kind == "reserved" and pool.capacity_type == "CAPACITY_BLOCK":
            continue
        code = itype.quota_code("SPOT" if kind == "spot" else "ON_DEMAND")
        if code:
            demand[code] = vcpus
    return demand


def zones(spec: ClusterSpec, pool: NodePool) -> list[str]:
    """The same zones as the pool would get as a node group: an EFA pool (any capacity type) or a capacity
    block stays in its `availabilityZone`."""
    return list(pool_zones(spec, pool))


def placement_group_name(spec: ClusterSpec, pool: NodePool) -> str | None:
    """The cluster placement group of an EFA pool that launches On-Demand or Spot capacity only: EFA's
    OS-bypass traffic needs the instances close together (EC2NodeClass `placementGroupSelector`, "Cluster"
    strategy, e.g. EFA workloads: website/content/en/docs/concepts/nodeclasses.md @v1.14.1). None for pools
    with a reservation: a capacity block fixes where its instances are, and an ODCR's instances land in a
    placement group only if the reservation was made for it."""
    if not pool.efa or reserved(pool):
        return None
    return f"{spec.cluster.name}-{pool.name}"


def node_role_name(spec: ClusterSpec) -> str:
    """The IAM role of Karpenter's nodes: named, because the EC2NodeClass refers to it by name."""
    return f"{spec.cluster.name}-karpenter-node"


def workload(pool: NodePool) -> str:
    return pool.karpenter.workload if pool.karpenter else "training"
