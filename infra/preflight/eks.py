"""Preflight checks against EKS and IAM: what CreateCluster and the first `up` would otherwise find too late.

- every `adminRoleArns` role exists (CreateAccessEntry fails for a principal that does not, after the
  cluster exists; EKS API reference, CreateAccessEntry: "InvalidParameterException");
- the pinned `eks-node-monitoring-agent` add-on version (and `aws-ebs-csi-driver`'s, when the stack installs
  Prometheus) is published for the cluster's Kubernetes version (EKS API DescribeAddonVersions);
- a CAPACITY_BLOCK node group is not asked to change AMI release, Kubernetes version or launch template
  while it runs nodes: EKS updates such a group only at desired size 0 (EKS User Guide, "Create a managed node group
  with Capacity Blocks for ML": update "the node group's desired size to 0" first), and a full block has
  no spare instance for a rolling update;
- the `aws` CLI the kubeconfig's exec plugin calls is installed on this machine.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from infra.aws.addons.ebs_csi import ADDON as EBS_CSI_ADDON
from infra.aws.addons.ebs_csi import installs_ebs_csi
from infra.aws.addons.eks_addons import MONITORING_ADDON
from infra.aws.nodepools import (
    LAUNCH_TEMPLATE_TAG,
    launch_template_fingerprint,
    launch_template_tags,
    plan_node_groups,
    release_version,
)
from infra.preflight.checks import api_error, pool_subject
from infra.preflight.findings import Finding, error, ok, warning
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


def _caller_account(iam: IAMClient, sts: Any) -> str:
    """The deploying account (sts:GetCallerIdentity), asked with the IAM client's own credentials."""
    if sts is None:
        creds = iam._get_credentials()  # type: ignore[attr-defined]  # botocore: the client's credentials
        frozen = creds.get_frozen_credentials() if creds is not None else None
        sts = boto3.client(
            "sts",
            region_name=iam.meta.region_name,
            config=iam.meta.config,
            aws_access_key_id=frozen.access_key if frozen else None,
            aws_secret_access_key=frozen.secret_key if frozen else None,
            aws_session_token=frozen.token if frozen else None,
        )
    return str(sts.get_caller_identity()["Account"])


def check_admin_roles(iam: IAMClient, spec: ClusterSpec, sts: Any = None) -> list[Finding]:
    """Each `adminRoleArns` role, by its whole ARN: GetRole looks a name up in the caller's account only, so a
    role in another account cannot be checked from here (a STANDARD access entry may name one; EKS User
    Guide, "Create access entries"), and a role of the same name at another path is not the one named."""
    findings: list[Finding] = []
    if not spec.cluster.admin_role_arns:
        return findings
    subject = "admin roles"
    try:
        account = _caller_account(iam, sts)
    except ClientError as exc:
        return [api_error(subject, "sts:GetCallerIdentity", exc)]
    for i, arn in enumerate(spec.cluster.admin_role_arns):
        at = f"gpufleet:cluster.adminRoleArns[{i}]"
        owner = arn.split(":")[4]
        name = arn.split(":role/", 1)[1].rsplit("/", 1)[-1]
        if owner != account:
            findings.append(
                warning(
                    subject,
                    f"{arn} is in account {owner}, not the deploying account {account}: IAM cannot check it "
                    "from here, and its access entry fails after the cluster exists if it does not exist",
                    f"check it in account {owner} (aws iam get-role --role-name {name}), or fix {at}",
                )
            )
            continue
        try:
            have = iam.get_role(RoleName=name)["Role"]["Arn"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchEntity":
                have = None
            else:
                findings.append(api_error(subject, "iam:GetRole", exc))
                continue
        if have != arn:
            elsewhere = f" (the account's role {name} is {have})" if have else ""
            findings.append(
                error(
                    subject,
                    f"{arn} does not exist{elsewhere}: its access entry would fail after the cluster exists",
                    f"create the role, or fix or remove {at}",
                )
            )
            continue
        findings.append(ok(subject, f"{arn} exists"))
    return findings


def check_monitoring_addon(eks: EKSClient, spec: ClusterSpec) -> list[Finding]:
    """The node monitoring agent (every aws stack) and, with `prometheus: install`, the EBS CSI driver."""
    pinned = [(MONITORING_ADDON, spec.versions.node_monitoring_agent_addon, "nodeMonitoringAgentAddon")]
    if installs_ebs_csi(spec):
        pinned.append((EBS_CSI_ADDON, spec.versions.ebs_csi_driver_addon, "ebsCsiDriverAddon"))
    return [f for addon, version, key in pinned for f in check_addon_version(eks, spec, addon, version, key)]


def check_addon_version(
    eks: EKSClient, spec: ClusterSpec, addon: str, pinned: str, key: str
) -> list[Finding]:
    """CreateAddon with a version EKS does not publish for the minor fails after the node groups exist."""
    subject, minor = f"add-on {addon}", spec.cluster.kubernetes_version
    try:
        reply = eks.describe_addon_versions(addonName=addon, kubernetesVersion=minor)
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
            f"set gpufleet:versions.{key} to a published version (aws eks "
            f"describe-addon-versions --addon-name {addon} --kubernetes-version {minor} "
            f"--region {spec.region})",
        )
    ]


def planned_fingerprint(spec: ClusterSpec, pool_name: str) -> str | None:
    plan = next((p for p in plan_node_groups(spec) if p.pool == pool_name), None)
    return launch_template_fingerprint(plan, launch_template_tags(spec, plan)) if plan else None


def capacity_block_update_findings(
    spec: ClusterSpec, pool_name: str, group: dict[str, Any] | None, family: str
) -> list[Finding]:
    """Compare an existing capacity-block node group with what the deploy would set: release, Kubernetes
    version and launch template (its fingerprint tag; a group from before the tag is compared on versions)."""
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
    have_lt = (group.get("tags") or {}).get(LAUNCH_TEMPLATE_TAG)
    want_lt = planned_fingerprint(spec, pool_name)
    if have_lt and want_lt and have_lt != want_lt:
        changes.append(
            f"launch template {have_lt} -> {want_lt} (user data, volume or tags; a new template version "
            "replaces every node)"
        )
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
