"""What each EKS managed node group is, decided from the spec as plain data (`NodeGroupPlan`).

The node group component only applies a plan; AMI type, pinned release, labels, taints, autoscaler tags,
zone pinning and launch-template data are all chosen here and tested without Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra import catalog
from infra.aws import launch_template as lt
from infra.aws.tags import autoscaler_tags
from infra.errors import ConfigError
from infra.rules import SYSTEM_GROUP
from infra.scheduling import node_group_name, pool_view
from infra.spec import ClusterSpec, NodePool
from scheduler.model import PoolView

SYSTEM_VOLUME_GIB = 100
AMI_TYPES: dict[tuple[str, str], str] = {
    ("AL2023_NVIDIA", "x86_64"): "AL2023_x86_64_NVIDIA",
    ("AL2023_NVIDIA", "arm64"): "AL2023_ARM_64_NVIDIA",
    ("BOTTLEROCKET_NVIDIA", "x86_64"): "BOTTLEROCKET_x86_64_NVIDIA",
    ("BOTTLEROCKET_NVIDIA", "arm64"): "BOTTLEROCKET_ARM_64_NVIDIA",
    ("AL2023", "x86_64"): "AL2023_x86_64_STANDARD",
    ("AL2023", "arm64"): "AL2023_ARM_64_STANDARD",
}
EKS_EFFECT = {
    "NoSchedule": "NO_SCHEDULE",
    "NoExecute": "NO_EXECUTE",
    "PreferNoSchedule": "PREFER_NO_SCHEDULE",
}
# Bottlerocket NVIDIA nodes run their own device plugin; the GPU operator's must stay off them.
BOTTLEROCKET_OPERAND_LABELS = {"nvidia.com/gpu.deploy.device-plugin": "false"}
# Node auto-repair limits: a fleet-wide fault (a bad driver, a broken AMI) must not replace every node.
REPAIR = {
    "enabled": True,
    "max_parallel_nodes_repaired_percentage": 20,
    "max_unhealthy_node_threshold_percentage": 30,
}


@dataclass(frozen=True)
class NodeGroupPlan:
    pool: str
    name: str  # EKS node group name (also in the Auto Scaling group name: eks-<name>-<uuid>)
    instance_type: str
    ami_type: str
    ami_family: str
    release_version: str
    capacity_type: str
    min_size: int
    desired_size: int
    max_size: int
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...]  # Kubernetes form: key, value, effect (NoSchedule...)
    autoscaler_tags: dict[str, str]
    availability_zone: str | None  # None: every private subnet
    volume_gib: int
    efa_interfaces: int = 0
    placement_group: bool = False
    capacity_reservation_id: str | None = None
    gpu: bool = True
    repair: dict[str, Any] = field(default_factory=dict)

    @property
    def eks_taints(self) -> list[dict[str, str]]:
        return [{**t, "effect": EKS_EFFECT[t["effect"]]} for t in self.taints]

    @property
    def instance_type_in_template(self) -> bool:
        """Capacity blocks name the instance type in the template; EKS then forbids it on the node group."""
        return self.capacity_reservation_id is not None

    def launch_template(
        self, tags: dict[str, str], security_group_id: Any, placement_group: Any
    ) -> dict[str, Any]:
        return lt.launch_template_data(
            ami_family=self.ami_family,
            volume_gib=self.volume_gib,
            tags=tags,
            efa_count=self.efa_interfaces,
            security_group_id=security_group_id,
            placement_group=placement_group if self.placement_group else None,
            capacity_reservation_id=self.capacity_reservation_id,
            instance_type=self.instance_type,
        )


def release_version(spec: ClusterSpec, ami_family: str) -> str:
    """The pinned AMI release: EKS never silently moves a node group to the newest GPU AMI."""
    versions = spec.versions
    pinned = versions.bottlerocket_nvidia_release if ami_family.startswith("BOTTLEROCKET") else None
    pinned = pinned or versions.al2023_nvidia_ami_release
    if not pinned:  # spec.versions is resolved by check_spec; an unresolved spec is a programming error
        raise ConfigError(f"gpufleet:versions: no AMI release pinned for {ami_family}")
    return pinned


def gpu_labels(pool: PoolView, ami_family: str) -> dict[str, str]:
    """The pool's node labels (shared with the scheduler's flavors), plus the operand switches of its AMI."""
    labels = dict(pool.labels)
    if ami_family == "BOTTLEROCKET_NVIDIA":
        labels.update(BOTTLEROCKET_OPERAND_LABELS)
    return labels


def plan_gpu_pool(spec: ClusterSpec, pool: NodePool) -> NodeGroupPlan:
    itype = catalog.CATALOG[pool.instance_type or ""]
    view = pool_view(spec, pool)
    family = str(pool.ami_family)
    labels = gpu_labels(view, family)
    taints = tuple(dict(t) for t in view.taints)
    return NodeGroupPlan(
        pool=pool.name,
        name=node_group_name(spec, pool.name),
        instance_type=itype.name,
        ami_type=AMI_TYPES[(family, itype.arch)],
        ami_family=family,
        release_version=release_version(spec, family),
        capacity_type=pool.capacity_type,
        min_size=pool.min_size or 0,
        desired_size=pool.desired_size if pool.desired_size is not None else (pool.min_size or 0),
        max_size=pool.max_size or 0,
        labels=labels,
        taints=taints,
        autoscaler_tags=autoscaler_tags(spec.cluster.name, labels, taints, itype.gpus),
        availability_zone=pool.availability_zone if pool.capacity_type == "CAPACITY_BLOCK" else None,
        volume_gib=pool.root_volume_gi_b,
        efa_interfaces=itype.efa_interfaces if pool.efa else 0,
        placement_group=pool.efa and pool.capacity_type in ("ON_DEMAND", "SPOT"),
        capacity_reservation_id=pool.capacity_reservation_id
        if pool.capacity_type == "CAPACITY_BLOCK"
        else None,
        repair=dict(REPAIR),
    )


def plan_system_pool(spec: ClusterSpec) -> NodeGroupPlan:
    sp = spec.system_pool
    itype = catalog.CATALOG[sp.instance_type]
    labels = {"gpufleet.io/role": "system"}
    return NodeGroupPlan(
        pool=SYSTEM_GROUP,
        name=node_group_name(spec, SYSTEM_GROUP),
        instance_type=sp.instance_type,
        ami_type=AMI_TYPES[("AL2023", itype.arch)],
        ami_family="AL2023",
        # EKS publishes every AL2023 variant (standard and NVIDIA) under the same release version.
        release_version=release_version(spec, "AL2023"),
        capacity_type="ON_DEMAND",
        min_size=sp.min_size,
        desired_size=sp.desired_size,
        max_size=sp.max_size,
        labels=labels,
        taints=(),
        autoscaler_tags=autoscaler_tags(spec.cluster.name, labels, (), 0),
        availability_zone=None,
        volume_gib=SYSTEM_VOLUME_GIB,
        gpu=False,
    )


def plan_node_groups(spec: ClusterSpec) -> list[NodeGroupPlan]:
    """The system group first, then one group per GPU pool, in spec order."""
    return [plan_system_pool(spec), *(plan_gpu_pool(spec, p) for p in spec.node_pools)]
