"""What each EKS managed node group is, decided from the spec as plain data (`NodeGroupPlan`).

The node group component only applies a plan; AMI type, pinned release, labels, taints, autoscaler tags,
zone pinning and launch-template data are all chosen here and tested without Pulumi. So are a group's tags and
its launch template's fingerprint, which the component writes and preflight compares with a running group.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from infra import catalog
from infra.aws import launch_template as lt
from infra.aws.tags import autoscaler_tags, common_tags, ownership_tags, scale_down_options
from infra.aws.userdata import node_user_data
from infra.errors import ConfigError
from infra.pools import SYSTEM_GROUP, pool_zones
from infra.scheduling import ACCELERATOR_LABEL, node_group_name, pool_view
from infra.spec import ClusterSpec, NodePool
from scheduler.labels import GPU_OPERANDS_LABEL
from scheduler.model import PoolView
from scheduler.resources import gpu_resource, gpu_units

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
# Bottlerocket NVIDIA nodes ship the driver, the container toolkit and their own device plugin, and support
# neither the operator's MIG manager nor its toolkit or validator; `nvidia.com/gpu.deploy.operands=false`
# keeps every GPU operator operand off them (GPU Operator docs, "Disabling operands on a node"). Their GPU
# health comes from the EKS node monitoring agent, which runs on them as on AL2023.
BOTTLEROCKET_OPERAND_LABELS = {GPU_OPERANDS_LABEL: "false"}
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Node auto-repair, as counts (EKS API NodeRepairConfig): a percentage threshold stops repairs as soon as one
# node of a small group is sick (1 of 3 is 33% > 30%). Repairs go one node at a time and stop when more than
# ~30% of the group's maximum (at least one node) is unhealthy at once: that looks like a fleet-wide fault (a
# bad driver, a broken AMI), which replacing nodes would not fix.
REPAIR_THRESHOLD_FRACTION = 0.3


def repair_config(max_size: int) -> dict[str, Any]:
    """`node_repair_config` for a group of at most `max_size` nodes: counts, one node repaired at a time."""
    return {
        "enabled": True,
        "max_parallel_nodes_repaired_count": 1,
        "max_unhealthy_node_threshold_count": max(1, math.ceil(REPAIR_THRESHOLD_FRACTION * max_size)),
    }


@dataclass(frozen=True)
class NodeGroupPlan:
    pool: str
    name: str  # EKS node group name (also in the Auto Scaling group name: eks-<name>-<uuid>)
    instance_type: str  # the type the flavor's CPU and memory are sized from
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
    availability_zones: tuple[str, ...] | None  # None: every private subnet
    volume_gib: int
    efa_interfaces: int = 0
    placement_group: bool = False
    capacity_reservation_id: str | None = None
    gpu: bool = True
    repair: dict[str, Any] = field(default_factory=dict)
    instance_types: tuple[str, ...] = ()  # every type the group may launch (Spot diversification)
    user_data: str | None = None

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
            user_data=self.user_data,
        )


def release_version(spec: ClusterSpec, ami_family: str) -> str:
    """The pinned AMI release: EKS never silently moves a node group to the newest GPU AMI."""
    versions = spec.versions
    pinned = versions.bottlerocket_nvidia_release if ami_family.startswith("BOTTLEROCKET") else None
    pinned = pinned or versions.al2023_nvidia_ami_release
    if not pinned:  # spec.versions is resolved by check_spec; an unresolved spec is a programming error
        raise ConfigError(f"gpufleet:versions: no AMI release pinned for {ami_family}")
    return pinned


# A MIG node boots with `nvidia.com/mig.config` already set (the group's label), so the device plugin could
# start before mig-manager has partitioned the GPUs: pods then get whole GPUs and the plugin fails on MIG
# devices it cannot find (NVIDIA/gpu-operator#2670). Booting with the device plugin paused closes the race:
# mig-manager (v0.15.0, pinned by GPU operator v26.7.0) applies the label's layout at start and then sets
# every paused operand back to "true" (mig-parted pkg/mig/reconfigure/reconfigure.go, maybeSetTrue).
MIG_BOOT_LABELS = {"nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change"}


def gpu_labels(pool: PoolView, ami_family: str) -> dict[str, str]:
    """The pool's node labels (shared with the scheduler's flavors), plus the operand switches of its AMI.

    Public: the Karpenter node classes label their nodes with exactly these.
    """
    labels = dict(pool.labels)
    if ami_family == "BOTTLEROCKET_NVIDIA":
        labels.update(BOTTLEROCKET_OPERAND_LABELS)
    if pool.sharing == "mig":
        labels.update(MIG_BOOT_LABELS)
    return labels


def node_template_resources(view: PoolView, efa_interfaces: int = 0) -> dict[str, int]:
    """The extended resources one node of the pool offers, as its pods request them.

    The GPU resource and its count come from `scheduler.resources` (the functions that size the pool's Kueue
    quota), so a group's template and its flavor can never disagree: `nvidia.com/gpu` = GPUs on whole-GPU
    pools, `nvidia.com/gpu.shared` = GPUs x replicas on time-sliced pools, `nvidia.com/mig-<profile>` =
    GPUs x instances on MIG pools; plus `vpc.amazonaws.com/efa` = the EFA interfaces of EFA pools.
    """
    # A DRA-shared pool's GPUs are ResourceSlice devices, never an extended resource of the node.
    resources = (
        {} if view.sharing == "draShares" else {gpu_resource(view): gpu_units(view, view.gpus_per_node)}
    )
    if efa_interfaces:
        resources[EFA_RESOURCE] = efa_interfaces
    return resources


def pool_instance_types(pool: NodePool) -> tuple[str, ...]:
    """Every instance type the pool's group may launch (`instanceTypes`, else `instanceType`)."""
    return tuple(pool.instance_types or [pool.instance_type or ""])


def plan_gpu_pool(spec: ClusterSpec, pool: NodePool) -> NodeGroupPlan:
    itype = catalog.CATALOG[pool.instance_type or ""]
    view = pool_view(spec, pool)
    family = str(pool.ami_family)
    labels = gpu_labels(view, family)
    taints = tuple(dict(t) for t in view.taints)
    efa = itype.efa_interfaces if pool.efa else 0
    block = pool.capacity_type == "CAPACITY_BLOCK"
    zones = pool_zones(spec, pool)
    return NodeGroupPlan(
        pool=pool.name,
        name=node_group_name(spec, pool.name),
        instance_type=itype.name,
        instance_types=pool_instance_types(pool),
        ami_type=AMI_TYPES[(family, itype.arch)],
        ami_family=family,
        release_version=release_version(spec, family),
        capacity_type=pool.capacity_type,
        min_size=pool.min_size or 0,
        desired_size=pool.desired_size if pool.desired_size is not None else (pool.min_size or 0),
        max_size=pool.max_size or 0,
        labels=labels,
        taints=taints,
        autoscaler_tags=autoscaler_tags(
            spec.cluster.name,
            labels,
            taints,
            node_template_resources(view, efa),
            # Capacity-block nodes are never scaled down; busy GPU nodes are never drained to consolidate.
            scale_down_options(block, ACCELERATOR_LABEL in labels) or None,
        ),
        availability_zones=None if zones == tuple(spec.availability_zones) else zones,
        volume_gib=pool.root_volume_gi_b,
        efa_interfaces=efa,
        placement_group=pool.efa and not block,
        capacity_reservation_id=pool.capacity_reservation_id if block else None,
        repair=repair_config(pool.max_size or 0),
        user_data=node_user_data(family),
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
        autoscaler_tags=autoscaler_tags(spec.cluster.name, labels, (), {}),
        availability_zones=None,
        instance_types=(sp.instance_type,),
        volume_gib=SYSTEM_VOLUME_GIB,
        gpu=False,
    )


def plan_node_groups(spec: ClusterSpec) -> list[NodeGroupPlan]:
    """The system group first, then one group per GPU pool, in spec order."""
    return [plan_system_pool(spec), *(plan_gpu_pool(spec, p) for p in spec.node_pools)]


# The node group carries a fingerprint of the launch template the deploy gave it (the tag stays on the EKS
# resource: managed node group tags reach neither the Auto Scaling group nor the instances, so writing it
# rolls nothing). Any change to the template (user data, volume, tags into tag_specifications) makes a new
# template version, and a new version rolls every node of the group like an AMI change.
LAUNCH_TEMPLATE_TAG = "gpufleet.io/launch-template"


def launch_template_fingerprint(plan: NodeGroupPlan, group_tags: dict[str, str]) -> str:
    """A short hash of what the deploy puts in the group's launch template, the cluster's own ids left out
    (the security group and placement group are fixed once the cluster and pool exist)."""
    data = plan.launch_template(group_tags, "<cluster-security-group>", "<placement-group>")
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def node_group_tags(spec: ClusterSpec, plan: NodeGroupPlan) -> dict[str, str]:
    """The tags of a pool's node group (on the EKS resource: they reach no instance and roll nothing)."""
    return {**common_tags(spec), **plan.autoscaler_tags, "Name": plan.name}


def launch_template_tags(spec: ClusterSpec, plan: NodeGroupPlan) -> dict[str, str]:
    """The tags the launch template gives the group's instances and volumes: the group's, without the user's
    `cluster.tags` unless `cluster.tagNodes`, since any change to them is a new template version that rolls
    every node of the group (and evicts its pods)."""
    owner = common_tags(spec) if spec.cluster.tag_nodes else ownership_tags(spec)
    return {**owner, **plan.autoscaler_tags, "Name": plan.name}
