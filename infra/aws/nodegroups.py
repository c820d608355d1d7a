"""The node groups: the system group and one EKS managed node group per GPU pool, applied from their plans.

Managed node group tags stay on the EKS resource and never reach its Auto Scaling group, yet the ASG's tags are
where the cluster-autoscaler's documented scale-from-zero contract reads a group's node template (GPUs,
labels, taints). EKS puts the discovery tags on the ASG itself; the node-template tags are written there
here (`aws.autoscaling.Tag`, not propagated to instances). `eks:DescribeNodegroup` in the autoscaler's policy
lets recent versions read labels and taints from EKS as well.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws import iam
from infra.aws.addons.eks_addons import MONITORING_ADDON, monitoring_agent_configuration
from infra.aws.cluster import Cluster
from infra.aws.network import Network
from infra.aws.nodepools import (
    LAUNCH_TEMPLATE_TAG,
    NodeGroupPlan,
    launch_template_fingerprint,
    launch_template_tags,
    node_group_tags,
    plan_node_groups,
)
from infra.aws.tags import CA_PREFIX, common_tags, partition
from infra.pools import SYSTEM_GROUP
from infra.spec import ClusterSpec


class NodeGroups(pulumi.ComponentResource):
    groups: dict[str, aws.eks.NodeGroup]  # pool name (or "system") -> node group

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        network: Network,
        cluster: Cluster,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpufleet:aws:NodeGroups", name, None, opts)
        self._name, self._spec, self._network, self._cluster = name, spec, network, cluster
        self._tags = common_tags(spec)
        child = pulumi.ResourceOptions(parent=self)
        part = partition(spec.region or "")
        self.role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=iam.service_trust_policy("ec2.amazonaws.com"),
            tags=self._tags,
            opts=child,
        )
        self._attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=self.role.name,
                policy_arn=iam.managed_policy_arn(part, policy),
                opts=child,
            )
            for policy in iam.NODE_POLICIES
        ]
        self.groups = {plan.pool: self._group(plan) for plan in plan_node_groups(spec)}
        # Reads NVIDIA XID errors and DCGM health and reports node conditions that node auto-repair acts on.
        self.monitoring = aws.eks.Addon(
            f"{name}-{MONITORING_ADDON}",
            cluster_name=cluster.eks.name,
            addon_name=MONITORING_ADDON,
            addon_version=spec.versions.node_monitoring_agent_addon,
            configuration_values=monitoring_agent_configuration(spec),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=self._tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.groups[SYSTEM_GROUP]]),
        )
        self.register_outputs({"names": {k: g.node_group_name for k, g in self.groups.items()}})

    def _group(self, plan: NodeGroupPlan) -> aws.eks.NodeGroup:
        name = f"{self._name}-{plan.pool}"
        child = pulumi.ResourceOptions(parent=self)
        group_tags = node_group_tags(self._spec, plan)
        instance_tags = launch_template_tags(self._spec, plan)
        placement = None
        if plan.placement_group:
            placement = aws.ec2.PlacementGroup(name, strategy="cluster", tags=self._tags, opts=child).name
        template = aws.ec2.LaunchTemplate(
            name,
            description=f"{plan.name}: IMDSv2, encrypted gp3, pinned by the node group",
            **plan.launch_template(instance_tags, self._cluster.security_group_id, placement),
            tags=self._tags,
            opts=child,
        )
        subnets: Any = (
            self._network.private_subnets_in(*plan.availability_zones)
            if plan.availability_zones
            else self._network.private_subnet_ids
        )
        taints: Any = plan.eks_taints
        repair: Any = plan.repair or None
        group = aws.eks.NodeGroup(
            name,
            cluster_name=self._cluster.eks.name,
            node_group_name=plan.name,
            node_role_arn=self.role.arn,
            subnet_ids=subnets,
            version=self._spec.cluster.kubernetes_version,
            ami_type=plan.ami_type,
            release_version=plan.release_version,
            capacity_type=plan.capacity_type,
            instance_types=None if plan.instance_type_in_template else list(plan.instance_types),
            scaling_config={
                "min_size": plan.min_size,
                "desired_size": plan.desired_size,
                "max_size": plan.max_size,
            },
            update_config={"max_unavailable": 1},
            labels=plan.labels,
            taints=taints,
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            node_repair_config=repair,
            # The template's fingerprint, for preflight's capacity-block guard (on the group only: rolls nothing).
            tags={**group_tags, LAUNCH_TEMPLATE_TAG: launch_template_fingerprint(plan, instance_tags)},
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=self._attachments,
                # The autoscaler owns the desired size once the group exists.
                ignore_changes=["scalingConfig.desiredSize"],
            ),
        )
        self._asg_tags(name, group, plan)
        return group

    def _asg_tags(self, name: str, group: aws.eks.NodeGroup, plan: NodeGroupPlan) -> None:
        asg = group.resources.apply(lambda r: r[0].autoscaling_groups[0].name)  # type: ignore[index]
        template_tags = {
            k: v for k, v in plan.autoscaler_tags.items() if k.startswith(f"{CA_PREFIX}/node-template/")
        }
        for key, value in sorted(template_tags.items()):
            # Named by the tag key (hashed: keys hold slashes), so adding a label replaces nothing else.
            aws.autoscaling.Tag(
                f"{name}-ca-{hashlib.sha256(key.encode()).hexdigest()[:10]}",
                autoscaling_group_name=asg,
                tag={"key": key, "value": value, "propagate_at_launch": False},
                opts=pulumi.ResourceOptions(parent=self),
            )
