"""The in-cluster add-ons on EKS, installed through a Kubernetes provider built from the new cluster.

Everything here waits for the node groups (a helm release whose pods cannot be scheduled fails): the GPU
stack (operator + scheduling, shared with the `existing` platform), the cluster-autoscaler with its IRSA role
(for the managed node groups that have GPU pools: all of them, or under Karpenter the shared-GPU pools),
Karpenter with its NodePools (`cluster.autoscaler: karpenter`), and the EFA device plugin when a pool uses EFA.
With `prometheus: install` the EBS CSI driver add-on and a default gp3 StorageClass come first, so the metrics
stack's volume claim binds (infra.aws.addons.ebs_csi).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pulumi_kubernetes.yaml.v2 import ConfigGroup

from infra.aws import iam
from infra.aws.addons import cluster_autoscaler as ca
from infra.aws.addons import ebs_csi, efa, vpc_cni
from infra.aws.cluster import Cluster
from infra.aws.karpenter.component import Karpenter
from infra.aws.network import Network
from infra.aws.tags import common_tags, partition
from infra.gpu_stack.component import GpuStack
from infra.gpu_stack.helm import chart_release
from infra.pools import needs_cluster_autoscaler, uses_karpenter
from infra.spec import ClusterSpec


class Addons(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        cluster: Cluster,
        node_groups: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
        network: Network | None = None,
        system_nodes: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("gpufleet:aws:Addons", name, None, opts)
        # After the admin access entries: a role in adminRoleArns that deploys reaches the cluster through its own.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=cluster.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self, depends_on=cluster.admin_access),
        )
        after_nodes = pulumi.ResourceOptions(
            parent=self, provider=self.provider, depends_on=list(node_groups)
        )
        self.storage: list[pulumi.Resource] = []
        if ebs_csi.installs_ebs_csi(spec):
            self.storage = self._ebs_csi(name, spec, cluster, node_groups, after_nodes)
        self.gpu = GpuStack(
            f"{name}-gpu",
            spec,
            self.provider,
            [*node_groups, *self.storage],
            pulumi.ResourceOptions(parent=self),
        )
        self.karpenter: Karpenter | None = None
        if uses_karpenter(spec) and network is not None:
            # Its chart's ServiceMonitor (with an installed Prometheus) waits for the release serving the kind.
            self.karpenter = Karpenter(
                f"{name}-karpenter",
                spec,
                network,
                cluster,
                self.provider,
                system_nodes,
                pulumi.ResourceOptions(parent=self),
                metrics=self.gpu.metrics,
            )
        self.autoscaler: k8s.helm.v3.Release | None = None
        if needs_cluster_autoscaler(spec):
            # Its chart renders a ServiceMonitor when monitoring is on: after the release that installs that CRD.
            crds = [self.gpu.metrics] if self.gpu.metrics else []
            self._cluster_autoscaler(
                name,
                spec,
                cluster,
                pulumi.ResourceOptions.merge(after_nodes, pulumi.ResourceOptions(depends_on=crds)),
            )
        # Turns on the VPC CNI's network policy agent, so the team namespaces' NetworkPolicies are enforced.
        self.vpc_cni = aws.eks.Addon(
            f"{name}-{vpc_cni.ADDON}",
            cluster_name=cluster.eks.name,
            addon_name=vpc_cni.ADDON,
            configuration_values=vpc_cni.configuration_values(),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=common_tags(spec),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.efa: k8s.helm.v3.Release | None = None
        if efa.efa_pools(spec):
            self.efa = chart_release(
                f"{name}-efa",
                spec,
                "aws-efa-k8s-device-plugin",
                efa.NAMESPACE,
                after_nodes,
                values=efa.efa_values(spec),
                timeout_s=1200,
            )
        self.register_outputs({"autoscaler": self.autoscaler.status if self.autoscaler else None})

    def _ebs_csi(
        self,
        name: str,
        spec: ClusterSpec,
        cluster: Cluster,
        node_groups: Sequence[pulumi.Resource],
        after_nodes: pulumi.ResourceOptions,
    ) -> list[pulumi.Resource]:
        """The driver add-on with its IRSA role (it runs on the nodes: EKS waits for it ACTIVE), then the class."""
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-{ebs_csi.ADDON}",
            assume_role_policy=pulumi.Output.all(cluster.oidc_provider.arn, cluster.issuer_url).apply(
                lambda a: iam.irsa_trust_policy(a[0], a[1], ebs_csi.NAMESPACE, ebs_csi.SERVICE_ACCOUNT)
            ),
            tags=common_tags(spec),
            opts=child,
        )
        policy = aws.iam.RolePolicyAttachment(
            f"{name}-{ebs_csi.ADDON}",
            role=role.name,
            policy_arn=iam.managed_policy_arn(partition(spec.region or ""), ebs_csi.POLICY),
            opts=child,
        )
        addon = aws.eks.Addon(
            f"{name}-{ebs_csi.ADDON}",
            cluster_name=cluster.eks.name,
            addon_name=ebs_csi.ADDON,
            addon_version=spec.versions.ebs_csi_driver_addon,
            service_account_role_arn=role.arn,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=common_tags(spec),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy, *node_groups]),
        )
        storage_class = ConfigGroup(
            f"{name}-storage-class",
            objs=[ebs_csi.default_storage_class()],
            opts=pulumi.ResourceOptions.merge(after_nodes, pulumi.ResourceOptions(depends_on=[addon])),
        )
        return [addon, storage_class]

    def _cluster_autoscaler(
        self, name: str, spec: ClusterSpec, cluster: Cluster, after_nodes: pulumi.ResourceOptions
    ) -> None:
        role = aws.iam.Role(
            f"{name}-cluster-autoscaler",
            assume_role_policy=pulumi.Output.all(cluster.oidc_provider.arn, cluster.issuer_url).apply(
                lambda a: iam.irsa_trust_policy(a[0], a[1], ca.NAMESPACE, ca.SERVICE_ACCOUNT)
            ),
            tags=common_tags(spec),
            opts=pulumi.ResourceOptions(parent=self),
        )
        policy = aws.iam.RolePolicy(
            f"{name}-cluster-autoscaler",
            role=role.id,
            policy=iam.autoscaler_policy(spec.cluster.name),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.autoscaler = chart_release(
            f"{name}-cluster-autoscaler",
            spec,
            "cluster-autoscaler",
            ca.NAMESPACE,
            pulumi.ResourceOptions.merge(after_nodes, pulumi.ResourceOptions(depends_on=[policy])),
            values=ca.cluster_autoscaler_values(spec, role.arn),
            timeout_s=1200,
        )
