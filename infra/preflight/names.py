"""Preflight: the account-wide names a new cluster's stack takes are free.

IAM role names are unique per account, across regions (IAM User Guide, "IAM object quotas and names": names
"must be unique within the account"). The Karpenter node role is named, not generated, because every
EC2NodeClass refers to it by name (infra.pools.node_role_name: `<cluster>-karpenter-node`). A second stack with
the same cluster name in another region of the account would fail with `EntityAlreadyExists` part-way through
its first `up`, after its network and cluster exist. So for a cluster the deploy creates, an existing role of
that name is refused. (The name stays as it is: changing it on a running cluster would change every
EC2NodeClass's `role` and so drift, that is replace, every Karpenter node.)
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from infra.pools import karpenter_pools, node_role_name
from infra.preflight.checks import api_error
from infra.preflight.findings import Finding, error, ok
from infra.spec import ClusterSpec

SUBJECT = "gpufleet:cluster.name"


def check_account_wide_names(eks: Any, iam: Any, spec: ClusterSpec) -> list[Finding]:
    if not karpenter_pools(spec):
        return []
    role = node_role_name(spec)
    try:
        eks.describe_cluster(name=spec.cluster.name)
        return []  # a running cluster: the role is its own
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            return [api_error(SUBJECT, "eks:DescribeCluster", exc)]
    try:
        iam.get_role(RoleName=role)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchEntity":
            return [ok(SUBJECT, f"IAM role {role} (Karpenter's nodes) is free in the account")]
        return [api_error(SUBJECT, "iam:GetRole", exc)]
    return [
        error(
            SUBJECT,
            f"IAM role {role} already exists, but cluster {spec.cluster.name} does not exist in {spec.region}: "
            "IAM role names are account-wide, so another region's stack with this cluster name (or one "
            "destroyed half-way) holds it, and the first deploy would fail with EntityAlreadyExists",
            "choose another gpufleet:cluster.name, or delete the role if nothing uses it",
        )
    ]
