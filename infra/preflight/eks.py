"""Preflight checks against EKS and IAM: what CreateCluster and the first `up` would otherwise find too late.

- every `adminRoleArns` role exists (CreateAccessEntry fails for a principal that does not, after the
  cluster exists; EKS API reference, CreateAccessEntry: "InvalidParameterException");
- the pinned `eks-node-monitoring-agent` add-on version is published for the cluster's Kubernetes version
  (EKS API DescribeAddonVersions);
- a CAPACITY_BLOCK node group is not asked to change AMI release or Kubernetes version while it runs
  nodes: EKS updates such a group only at desired size 0 (EKS User Guide, "Create a managed node group
  with Capacity Blocks for ML": update "the node group's desired size to 0" first), and a full block has
  no spare instance for a rolling update;
- the `aws` CLI the kubeconfig's exec plugin calls is installed on this machine.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from infra.aws.eks_addons import MONITORING_ADDON
from infra.aws.nodepools import release_version
from infra.preflight.checks import api_error, pool_subject
from infra.preflight.findings import Finding, error, ok
from infra.scheduling import node_group_name
from infra.spec import ClusterSpec

if TYPE_CHECKING:
    from mypy_boto3_eks import EKSClient
    from mypy_boto3_iam import IAMClient

AWS_CLI_HINT = (
    "install the AWS CLI v2 (https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html): "
    "the kubeconfig's token comes from `aws eks get-token`"
)


def check_aws_cli(which: Any = shutil.which) -> list[Finding]:
    subject = "aws CLI"
    path = which("aws")
    if path is None:
        return [
            error(
                subject, "no `aws` on PATH: the add-ons could not authenticate to the cluster", AWS_CLI_HINT
            )
        ]
    return [ok(subject, f"{path} (the kubeconfig runs `aws eks get-token`)")]


def check_admin_roles(iam: IAMClient, spec: ClusterSpec) -> list[Finding]:
    findings = []
    for i, arn in enumerate(spec.cluster.admin_role_arns):
        subject, at = "admin roles", f"gpufleet:cluster.adminRoleArns[{i}]"
        name = arn.split(":role/", 1)[1].rsplit("/", 1)[-1]
        try:
            iam.get_role(RoleName=name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchEntity":
                findings.append(
                    error(
                        subject,
                        f"{arn} does not exist: its access entry would fail after the cluster exists",
                        f"create the role, or fix or remove {at}",
                    )
                )
                continue
            findings.append(api_error(subject, "iam:GetRole", exc))
            continue
        findings.append(ok(subject, f"{arn} exists"))
    return findings


def check_monitoring_addon(eks: EKSClient, spec: ClusterSpec) -> list[Finding]:
    subject, pinned = f"add-on {MONITORING_ADDON}", spec.versions.node_monitoring_agent_addon
    minor = spec.cluster.kubernetes_version
    try:
        reply = eks.describe_addon_versions(addonName=MONITORING_ADDON, kubernetesVersion=minor)
    except ClientError as exc:
        return [api_error(subject, "eks:DescribeAddonVersions", exc)]
    published = [v["addonVersion"] for a in reply.get("addons", []) for v in a.get("addonVersions", [])]
    if pinned in published:
        return [ok(subject, f"{pinned} is published for Kubernetes {minor}")]
    latest = ", ".join(published[:3]) or "none"
    return [
        error(
            subject,
            f"{pinned} is not published for Kubernetes {minor} in {spec.region} (published: {latest})",
            "set gpufleet:versions.nodeMonitoringAgentAddon to a published version (aws eks "
            f"describe-addon-versions --addon-name {MONITORING_ADDON} --kubernetes-version {minor} "
            f"--region {spec.region})",
        )
    ]


def capacity_block_update_findings(
    spec: ClusterSpec, pool_name: str, group: dict[str, Any] | None, family: str
) -> list[Finding]:
    """Compare an existing capacity-block node group with what the deploy would set."""
    subject = pool_subject(pool_name)
    if group is None:
        return []
    want_release, want_version = release_version(spec, family), spec.cluster.kubernetes_version
    changes = [
        f"{what} {have} -> {want}"
        for what, have, want in (
            ("release", group.get("releaseVersion"), want_release),
            ("Kubernetes", group.get("version"), want_version),
        )
        if have and have != want
    ]
    desired = int((group.get("scalingConfig") or {}).get("desiredSize") or 0)
    if not changes:
        return [ok(subject, f"capacity-block group at {group.get('releaseVersion')}: no version change")]
    if desired == 0:
        return [ok(subject, f"capacity-block group is empty; it can move ({'; '.join(changes)})")]
    name = node_group_name(spec, pool_name)
    return [
        error(
            subject,
            f"capacity-block group {name} runs {desired} node(s) and would change ({'; '.join(changes)}): EKS "
            "updates a capacity-block group only at desired size 0, and a full block has no room to roll",
            f"drain the pool's jobs, then: aws eks update-nodegroup-config --cluster-name {spec.cluster.name} "
            f"--nodegroup-name {name} --scaling-config minSize=0,desiredSize=0 --region {spec.region}; "
            "deploy, and let the autoscaler bring the nodes back",
        )
    ]


def check_capacity_block_updates(eks: EKSClient, spec: ClusterSpec) -> list[Finding]:
    findings: list[Finding] = []
    for pool in spec.node_pools:
        if pool.capacity_type != "CAPACITY_BLOCK":
            continue
        try:
            reply = eks.describe_nodegroup(
                clusterName=spec.cluster.name, nodegroupName=node_group_name(spec, pool.name)
            )
            group: dict[str, Any] | None = dict(reply["nodegroup"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                findings.append(api_error(pool_subject(pool.name), "eks:DescribeNodegroup", exc))
                continue
            group = None  # a first deploy: nothing to update
        findings += capacity_block_update_findings(spec, pool.name, group, str(pool.ami_family))
    return findings
