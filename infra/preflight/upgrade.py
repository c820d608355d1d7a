"""Preflight on a Kubernetes minor change of a running EKS cluster: one minor at a time, read from EKS itself.

EKS updates the control plane one minor at a time and cannot downgrade (EKS User Guide, "Update existing
cluster to new Kubernetes version"); UpdateClusterVersion refuses anything else, but only once `pulumi up` has
reached the cluster, after other changes went in. The version is read with eks:DescribeCluster, so a cluster
deployed before the stack recorded its rollout facts is checked too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from infra.preflight.checks import api_error
from infra.preflight.findings import Finding, error, ok
from infra.rollout import minor_step_problem
from infra.spec import ClusterSpec

if TYPE_CHECKING:
    from mypy_boto3_eks import EKSClient

SUBJECT = "kubernetes version"


def check_minor_step(eks: EKSClient, spec: ClusterSpec) -> list[Finding]:
    wanted = spec.cluster.kubernetes_version
    try:
        running = eks.describe_cluster(name=spec.cluster.name)["cluster"]["version"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return [ok(SUBJECT, f"a new cluster at {wanted}")]
        return [api_error(SUBJECT, "eks:DescribeCluster", exc)]
    if problem := minor_step_problem(running, wanted):
        said = problem.split(": ", 1)[1]
        return [
            error(SUBJECT, f"the cluster runs {running}: {said}", "set gpufleet:cluster.kubernetesVersion")
        ]
    if running == wanted:
        return [ok(SUBJECT, f"the cluster runs {running}, as the stack")]
    return [
        ok(
            SUBJECT,
            f"{running} -> {wanted}: the control plane first, then the node groups; "
            "`invoke preview` says what rolls, `invoke drain` lets running jobs finish first",
        )
    ]
