"""Karpenter on the EKS cluster: its AWS side, the pinned chart, and one NodePool + EC2NodeClass per pool.

Applied from the pure builders in `infra.aws.karpenter`:
- the node role (the upstream node policies) with an EKS access entry of type EC2_LINUX, so nodes Karpenter
  launches can join; the discovery tag `karpenter.sh/discovery: <cluster>` on the private subnets and the
  cluster security group, which every EC2NodeClass selects;
- the interruption queue (SQS, SSE, 5-minute retention, HTTPS only) fed by EventBridge rules for Spot
  interruption warnings, rebalance recommendations, AWS Health scheduled changes, instance state changes
  and capacity-reservation interruptions;
- the controller role (IRSA, one service account) with the least-privilege policy, the CRDs as their own
  release (`karpenter-crd`, so a version bump upgrades them) and the controller release on the system node group;
- the EC2NodeClasses, NodePools and the training do-not-disrupt policy, as custom resources.

Destroy order: NodePools go first (they depend on their EC2NodeClass); an EC2NodeClass keeps its
`karpenter.k8s.aws/termination` finalizer until no NodeClaim uses it (pkg/controllers/nodeclass/controller.go
at v1.14.1), so its deletion returns only once Karpenter has terminated the pool's instances. Only then are
the controller, its role, the node role's access entry and, last, the cluster deleted: no orphaned GPU
instances.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.aws import iam
from infra.aws.cluster import Cluster
from infra.aws.karpenter import iam as kiam
from infra.aws.karpenter.disruption import do_not_disrupt_policy
from infra.aws.karpenter.pools import DISCOVERY_TAG, karpenter_pools, node_class, node_pool
from infra.aws.karpenter.values import CRD_RELEASE, NAMESPACE, RELEASE, SERVICE_ACCOUNT, karpenter_values
from infra.aws.network import Network
from infra.aws.tags import common_tags, partition
from infra.gpu_stack.helm import chart_release
from infra.pools import node_role_name, placement_group_name
from infra.spec import ClusterSpec

NODECLASS_DELETE_TIMEOUT = "45m"  # draining GPU nodes and terminating their instances


def _account(role_arn: str) -> str:
    return role_arn.split(":")[4]


class Karpenter(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    node_pools: dict[str, k8s.apiextensions.CustomResource]
    node_classes: dict[str, k8s.apiextensions.CustomResource]

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        network: Network,
        cluster: Cluster,
        provider: k8s.Provider,
        system_nodes: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
        metrics: pulumi.Resource | None = None,
    ) -> None:
        """`metrics`: the kube-prometheus-stack release, when the chart's ServiceMonitor is on (its CRD)."""
        super().__init__("gpufleet:aws:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = common_tags(spec)
        part, region, cluster_name = partition(spec.region or ""), spec.region or "", spec.cluster.name

        node_role = aws.iam.Role(
            f"{name}-node",
            name=node_role_name(spec),
            assume_role_policy=iam.service_trust_policy("ec2.amazonaws.com"),
            tags=tags,
            opts=child,
        )
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=node_role.name,
                policy_arn=iam.managed_policy_arn(part, policy),
                opts=child,
            )
            for policy in iam.NODE_POLICIES
        ]
        access = aws.eks.AccessEntry(
            f"{name}-node",
            cluster_name=cluster.eks.name,
            principal_arn=node_role.arn,
            type="EC2_LINUX",
            tags=tags,
            opts=child,
        )
        discovery = self._discovery_tags(name, spec, network, cluster)

        queue = aws.sqs.Queue(
            f"{name}-interruption",
            name=cluster_name,
            message_retention_seconds=kiam.QUEUE_RETENTION_SECONDS,
            sqs_managed_sse_enabled=True,
            tags=tags,
            opts=child,
        )
        queue_policy = aws.sqs.QueuePolicy(
            f"{name}-interruption", queue_url=queue.url, policy=queue.arn.apply(kiam.queue_policy), opts=child
        )
        for kind in kiam.INTERRUPTION_EVENTS:
            rule = aws.cloudwatch.EventRule(
                f"{name}-{kind}",
                description=f"Karpenter interruption handling for {cluster_name}: {kind}",
                event_pattern=kiam.event_pattern(kind),
                tags=tags,
                opts=child,
            )
            aws.cloudwatch.EventTarget(
                f"{name}-{kind}",
                rule=rule.name,
                target_id="KarpenterInterruptionQueueTarget",
                arn=queue.arn,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[queue_policy]),
            )

        controller_role = aws.iam.Role(
            f"{name}-controller",
            assume_role_policy=pulumi.Output.all(cluster.oidc_provider.arn, cluster.issuer_url).apply(
                lambda a: iam.irsa_trust_policy(a[0], a[1], NAMESPACE, SERVICE_ACCOUNT)
            ),
            tags=tags,
            opts=child,
        )
        controller_policy = aws.iam.RolePolicy(
            f"{name}-controller",
            role=controller_role.id,
            policy=pulumi.Output.all(node_role.arn, queue.arn).apply(
                lambda a: kiam.controller_policy(
                    partition=part,
                    region=region,
                    account=_account(a[0]),
                    cluster=cluster_name,
                    node_role_arn=a[0],
                    queue_arn=a[1],
                )
            ),
            opts=child,
        )
        # The CRDs as their own release: Helm installs a chart's crds/ only once and never upgrades them, so
        # Karpenter's upgrade guide (v1.14.1, "CRD upgrades") recommends the karpenter-crd chart.
        self.crds = chart_release(
            f"{name}-crd",
            spec,
            "karpenter-crd",
            NAMESPACE,
            pulumi.ResourceOptions(parent=self, provider=provider),
            release=CRD_RELEASE,
            timeout_s=600,
            create_namespace=False,  # kube-system exists
            # A failed upgrade keeps the CRDs it created: deleting a CRD deletes every object of its kind.
            cleanup_on_fail=False,
        )
        self.release = chart_release(
            f"{name}-chart",
            spec,
            "karpenter",
            NAMESPACE,
            pulumi.ResourceOptions(
                parent=self,
                provider=provider,
                depends_on=[
                    *system_nodes,
                    controller_policy,
                    queue_policy,
                    self.crds,
                    *([metrics] if metrics else []),
                ],
            ),
            release=RELEASE,
            values=karpenter_values(spec, controller_role.arn, queue.name),
            timeout_s=600,
            create_namespace=False,  # kube-system exists
            skip_crds=True,  # the CRD release above owns them
        )
        # Node classes outlive their node pools and keep the node role, its access entry and the discovery
        # tags alive until Karpenter has terminated every instance (see the module docstring).
        class_deps: list[pulumi.Resource] = [self.release, access, *attachments, *discovery]
        self.node_classes, self.node_pools = {}, {}
        for pool in karpenter_pools(spec):
            # An EFA pool's cluster placement group, by the name its EC2NodeClass selects it by.
            group = placement_group_name(spec, pool)
            placement = (
                [
                    aws.ec2.PlacementGroup(
                        f"{name}-{pool.name}", name=group, strategy="cluster", tags=tags, opts=child
                    )
                ]
                if group
                else []
            )
            self.node_classes[pool.name] = self._object(
                f"{name}-class-{pool.name}",
                node_class(spec, pool),
                provider,
                [*class_deps, *placement],
                pulumi.CustomTimeouts(delete=NODECLASS_DELETE_TIMEOUT),
            )
            self.node_pools[pool.name] = self._object(
                f"{name}-pool-{pool.name}",
                node_pool(spec, pool),
                provider,
                [self.release, self.node_classes[pool.name]],
            )
        for obj in do_not_disrupt_policy(spec):
            self._object(f"{name}-{obj['kind'].lower()}", obj, provider, [])
        self.register_outputs(
            {"queue": queue.name, "node_role": node_role.name, "node_pools": sorted(self.node_pools)}
        )

    def _discovery_tags(
        self, name: str, spec: ClusterSpec, network: Network, cluster: Cluster
    ) -> list[pulumi.Resource]:
        """The tag every EC2NodeClass selects subnets and security groups by, as separate `aws.ec2.Tag`s only
        on what this stack does not tag itself: a brought VPC's subnets and the security group EKS creates
        (subnets the stack creates carry it in their own tags: infra.aws.network.private_subnet_tags)."""
        cluster_name = spec.cluster.name
        child = pulumi.ResourceOptions(parent=self)
        out: list[pulumi.Resource] = []
        brought = network.private_subnet_ids if spec.cluster.network.vpc_id else []
        for i, subnet in enumerate(brought):
            out.append(
                aws.ec2.Tag(
                    f"{name}-subnet-{i}",
                    resource_id=subnet,
                    key=DISCOVERY_TAG,
                    value=cluster_name,
                    opts=child,
                )
            )
        out.append(
            aws.ec2.Tag(
                f"{name}-cluster-sg",
                resource_id=cluster.security_group_id,
                key=DISCOVERY_TAG,
                value=cluster_name,
                opts=child,
            )
        )
        return out

    def _object(
        self,
        name: str,
        obj: dict[str, Any],
        provider: k8s.Provider,
        depends_on: Sequence[pulumi.Resource],
        timeouts: pulumi.CustomTimeouts | None = None,
    ) -> k8s.apiextensions.CustomResource:
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        return k8s.apiextensions.CustomResource(
            name,
            api_version=obj["apiVersion"],
            kind=obj["kind"],
            metadata=obj["metadata"],
            opts=pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=list(depends_on), custom_timeouts=timeouts
            ),
            **body,
        )
