"""Preflight: whoever deploys can reach the cluster, first time and every time after.

The stack's Kubernetes provider authenticates as the identity that runs `invoke deploy` (the kubeconfig's
`aws eks get-token` uses the same profile and role as the AWS provider, infra.aws.cluster.provider_identity).
On EKS in `API` authentication mode that identity needs an access entry:

- On a new cluster EKS gives the creator one itself (`bootstrapClusterCreatorAdminPermissions`; EKS User
  Guide, "Grant IAM users access to Kubernetes with EKS access entries"), and a second entry for the same
  principal is refused with 409 `ResourceInUseException` after the cluster exists
  (terraform-aws-modules/terraform-aws-eks#2968, pulumi/pulumi-eks#2373), so every rerun fails the same way.
  The deploying role must therefore not be in `cluster.adminRoleArns` on a new cluster.
- On an existing cluster the deployer must be its creator (which holds the bootstrap entry) or hold an entry
  already, or be in `adminRoleArns`: the stack creates those entries before anything in the cluster
  (infra.aws.addons.component waits for them). Anyone else is Unauthorized for every in-cluster resource.

An assumed-role session (`arn:aws:sts::<account>:assumed-role/<role>/<session>`) stands for its role; the
session ARN carries no role path, so roles are compared by account and name.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from infra.preflight.checks import api_error
from infra.preflight.findings import Finding, error, ok
from infra.spec import ClusterSpec

SUBJECT = "deploying identity"


def principal_arn(caller_arn: str) -> str:
    """The IAM principal behind sts:GetCallerIdentity's ARN: an assumed role's role, else the ARN itself."""
    parts = caller_arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        role = parts[5].split("/")[1]
        return f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"
    return caller_arn


def _key(arn: str) -> tuple[str, str, str]:
    """(account, kind, name) of an IAM role or user ARN, the path left out; the whole ARN otherwise."""
    parts = arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "iam" and "/" in parts[5]:
        kind, _, rest = parts[5].partition("/")
        return parts[4], kind, rest.rsplit("/", 1)[-1]
    return arn, "", ""


def same_principal(a: str, b: str) -> bool:
    return _key(principal_arn(a)) == _key(principal_arn(b))


def _entries(eks: Any, cluster: str) -> list[str]:
    arns: list[str] = []
    for page in eks.get_paginator("list_access_entries").paginate(clusterName=cluster):
        arns += page.get("accessEntries", [])
    return arns


def check_deployer_access(eks: Any, sts: Any, spec: ClusterSpec) -> list[Finding]:
    """The two failures above, before `pulumi up` starts: each with the identity and the key to change."""
    name, admins = spec.cluster.name, spec.cluster.admin_role_arns
    try:
        principal = principal_arn(str(sts.get_caller_identity()["Arn"]))
    except ClientError as exc:
        return [api_error(SUBJECT, "sts:GetCallerIdentity", exc)]
    listed = [i for i, arn in enumerate(admins) if same_principal(arn, principal)]
    try:
        eks.describe_cluster(name=name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            return [api_error(SUBJECT, "eks:DescribeCluster", exc)]
        return _new_cluster(name, principal, listed)
    try:
        entries = _entries(eks, name)
    except ClientError as exc:
        return [api_error(SUBJECT, "eks:ListAccessEntries", exc)]
    if any(same_principal(entry, principal) for entry in entries):
        return [ok(SUBJECT, f"{principal} holds an access entry on cluster {name}")]
    if listed:
        return [
            ok(
                SUBJECT,
                f"{principal} is in gpufleet:cluster.adminRoleArns[{listed[0]}]: its access entry on cluster "
                f"{name} is created before anything in the cluster",
            )
        ]
    return [
        error(
            SUBJECT,
            f"{principal} has no access entry on the existing cluster {name} and is not in "
            "gpufleet:cluster.adminRoleArns: the Kubernetes provider would be Unauthorized for every in-cluster "
            "resource",
            f"deploy as the cluster's creator or an identity it lists, or add {principal} to "
            "gpufleet:cluster.adminRoleArns and deploy once as one that has access",
        )
    ]


def _new_cluster(name: str, principal: str, listed: list[int]) -> list[Finding]:
    if not listed:
        return [
            ok(
                SUBJECT,
                f"{principal} creates cluster {name} and gets its creator's access entry; adminRoleArns get "
                "their own",
            )
        ]
    return [
        error(
            SUBJECT,
            f"{principal}, which deploys, is also gpufleet:cluster.adminRoleArns[{i}]: EKS gives the creator of "
            f"cluster {name} an access entry itself and refuses a second one (409 ResourceInUseException), "
            "after the cluster exists, on every deploy",
            "remove it from gpufleet:cluster.adminRoleArns (it is admin as the creator), or deploy as another "
            'identity (docs/aws.md, "Who can deploy")',
        )
        for i in listed
    ]
