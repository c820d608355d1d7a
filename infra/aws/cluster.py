"""The EKS control plane: private by default, secrets envelope-encrypted, audited, API access entries, IRSA.

- endpoint: private always; public only with `endpointAccess.public` and its CIDR allow-list (never 0.0.0.0/0);
- secrets are envelope-encrypted with a customer-managed KMS key (rotation on);
- all control-plane log types go to a log group with a retention, created first so EKS does not make one
  that keeps logs forever;
- authentication mode API: the spec's admin roles get access entries with the cluster-admin policy; the
  identity that runs Pulumi keeps admin (it installs the add-ons);
- an OIDC provider lets add-ons (cluster-autoscaler) assume IAM roles (IRSA);
- the managed kube-scheduler scores nodes with the scheduler's NodeResourcesFit policy (GPU bin-packing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws import iam
from infra.aws.kubeconfig import kubeconfig
from infra.aws.network import Network
from infra.aws.scheduler_config import eks_scheduler_config
from infra.aws.tags import common_tags, partition
from infra.spec import ClusterSpec
from scheduler.model import fit_strategy

LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
LOG_RETENTION_DAYS = 90


def placement_config(spec: ClusterSpec) -> dict[str, Any]:
    """The managed scheduler's scoring: only the resource names EKS accepts (see infra.aws.scheduler_config).

    FragmentationAware keeps MostAllocated here: the control plane takes no extenders, so the extender is
    called by the in-cluster secondary scheduler that team GPU pods name; everything else stays packed."""
    placement = spec.scheduling.placement
    return eks_scheduler_config(fit_strategy(placement.strategy), dict(placement.weights))


API_PORT = 443


def private_access_rules(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Port-443 ingress on the cluster security group from the connected networks the spec names.

    EKS creates the cluster security group allowing only itself; a deployer on a VPN or peered network reaches
    the private endpoint only through a rule like these (EKS User Guide, "Cluster API server endpoint").
    """
    access = spec.cluster.endpoint_access
    rules: list[dict[str, Any]] = [
        {"cidr_ipv4": cidr, "description": f"EKS API from {cidr}"}
        for cidr in access.private_access_cidrs
        if ":" not in cidr
    ]
    rules += [
        {"cidr_ipv6": cidr, "description": f"EKS API from {cidr}"}
        for cidr in access.private_access_cidrs
        if ":" in cidr
    ]
    rules += [
        {"referenced_security_group_id": sg, "description": f"EKS API from {sg}"}
        for sg in access.private_access_security_group_ids
    ]
    return [{**r, "ip_protocol": "tcp", "from_port": API_PORT, "to_port": API_PORT} for r in rules]


def endpoint_config(spec: ClusterSpec) -> dict[str, Any]:
    access = spec.cluster.endpoint_access
    config: dict[str, Any] = {"endpoint_private_access": True, "endpoint_public_access": access.public}
    if access.public:
        config["public_access_cidrs"] = list(access.public_cidrs)
    return config


def provider_identity() -> tuple[str | None, str | None]:
    """The AWS profile and assumed role the program's AWS provider uses (`aws:profile`, `aws:assumeRoles`).

    The kubeconfig's `aws eks get-token` must authenticate as the same identity that created the cluster
    (the only admin at creation), not as whatever the shell's default credentials are. The provider assumes
    `aws:assumeRoles` in order (pulumi-aws provider configuration, `assumeRoles`), so its identity is the
    *last* role; `infra.rules` refuses chains and external IDs, which `get-token --role-arn` cannot express.
    """
    config = pulumi.Config("aws")
    profile = config.get("profile")
    roles = config.get_object("assumeRoles") or config.get_object("assumeRole")
    role = None
    if isinstance(roles, list) and roles:
        role = roles[-1].get("roleArn")
    elif isinstance(roles, dict):
        role = roles.get("roleArn")
    return profile, role


def _issuer(identities: Any) -> str:
    return str(identities[0].oidcs[0].issuer)


class Cluster(pulumi.ComponentResource):
    eks: aws.eks.Cluster
    oidc_provider: aws.iam.OpenIdConnectProvider
    kubeconfig: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    issuer_url: pulumi.Output[str]

    def __init__(
        self, name: str, spec: ClusterSpec, network: Network, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("gpufleet:aws:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = common_tags(spec)
        part = partition(spec.region or "")
        cluster_name = spec.cluster.name
        key = aws.kms.Key(
            f"{name}-secrets",
            description=f"EKS secrets envelope encryption for {cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=tags,
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=iam.service_trust_policy("eks.amazonaws.com"),
            tags=tags,
            opts=child,
        )
        attachments: list[pulumi.Resource] = [
            aws.iam.RolePolicyAttachment(
                f"{name}-role-{policy}",
                role=role.name,
                policy_arn=iam.managed_policy_arn(part, policy),
                opts=child,
            )
            for policy in iam.CLUSTER_POLICIES
        ]
        attachments.append(
            aws.iam.RolePolicy(
                f"{name}-role-secrets-key",
                role=role.id,
                policy=key.arn.apply(iam.secrets_key_policy),
                opts=child,
            )
        )
        logs = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=f"/aws/eks/{cluster_name}/cluster",
            retention_in_days=LOG_RETENTION_DAYS,
            tags=tags,
            opts=child,
        )
        vpc_config: Any = {"subnet_ids": network.private_subnet_ids, **endpoint_config(spec)}
        encryption: Any = {"provider": {"key_arn": key.arn}, "resources": ["secrets"]}
        scheduler: Any = placement_config(spec)
        self.eks = aws.eks.Cluster(
            name,
            name=cluster_name,
            version=spec.cluster.kubernetes_version,
            role_arn=role.arn,
            vpc_config=vpc_config,
            access_config={"authentication_mode": "API", "bootstrap_cluster_creator_admin_permissions": True},
            encryption_config=encryption,
            enabled_cluster_log_types=LOG_TYPES,
            kube_scheduler_config=scheduler,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*attachments, logs]),
        )
        self._admins(name, spec.cluster.admin_role_arns, part, child)
        self.issuer_url = self.eks.identities.apply(_issuer)
        self.oidc_provider = aws.iam.OpenIdConnectProvider(
            f"{name}-oidc", url=self.issuer_url, client_id_lists=["sts.amazonaws.com"], tags=tags, opts=child
        )
        self.security_group_id = self.eks.vpc_config.apply(lambda v: str(v.cluster_security_group_id))
        for i, rule in enumerate(private_access_rules(spec)):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-api-ingress-{i}", security_group_id=self.security_group_id, **rule, opts=child
            )
        ca = self.eks.certificate_authority.apply(lambda c: str(c.data))
        profile, role_arn = provider_identity()
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.eks.name, self.eks.endpoint, ca).apply(
                lambda a: kubeconfig(a[0], a[1], a[2], spec.region or "", profile=profile, role_arn=role_arn)
            )
        )
        self.register_outputs(
            {
                "name": self.eks.name,
                "endpoint": self.eks.endpoint,
                "oidc_provider_arn": self.oidc_provider.arn,
            }
        )

    def _admins(self, name: str, roles: Sequence[str], part: str, child: pulumi.ResourceOptions) -> None:
        """`self.admin_access`: what in-cluster resources wait for, so a listed role that deploys is let in."""
        self.admin_access: list[pulumi.Resource] = []
        for i, arn in enumerate(roles):
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{i}",
                cluster_name=self.eks.name,
                principal_arn=arn,
                type="STANDARD",
                opts=child,
            )
            association = aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{i}",
                cluster_name=self.eks.name,
                principal_arn=arn,
                policy_arn=iam.access_policy_arn(part),
                access_scope={"type": "cluster"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]),
            )
            self.admin_access.append(association)
