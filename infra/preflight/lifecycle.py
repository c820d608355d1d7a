"""Preflight on the cluster's Kubernetes minor: one step at a time, and what its support costs.

- EKS updates a control plane one minor at a time ("Update existing cluster to new Kubernetes version": "you
  can't skip minor versions") and never down; a spec that asks for more fails in the middle of `pulumi up`,
  after the preflight that passed. Preflight compares the spec's minor with the running cluster's
  (eks:DescribeCluster).
- A cluster whose minor has left standard support is in extended support, billed at the extended-support
  rate: EKS's default support type is EXTENDED ("Understand the Kubernetes version lifecycle on EKS":
  "Extended support is enabled by default"), and the stack sets no upgrade policy, so it is not refused but
  said (eks:DescribeClusterVersions: `status`, `endOfStandardSupportDate`).
- A minor EKS does not list at all (DescribeClusterVersions returns no entry for it, as for a minor upstream
  has released but EKS does not offer yet) is refused: CreateCluster or UpdateClusterVersion would fail.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from infra.preflight.checks import api_error
from infra.preflight.findings import Finding, error, ok, warning
from infra.spec import ClusterSpec

SUBJECT = "gpufleet:cluster.kubernetesVersion"
SOON = timedelta(days=60)


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def minor_step_findings(running: str | None, wanted: str) -> list[Finding]:
    """`running`: the cluster's version, None for a cluster the deploy creates."""
    if running is None or _minor(running) == _minor(wanted):
        return []
    (rmaj, rmin), (wmaj, wmin) = _minor(running), _minor(wanted)
    if (wmaj, wmin) == (rmaj, rmin + 1):
        return [
            ok(
                SUBJECT,
                f"{running} -> {wanted}: one minor, as EKS updates a control plane; the control plane first, then "
                "the node groups: `invoke preview` says what rolls, `invoke drain` lets running jobs finish first",
            )
        ]
    if (wmaj, wmin) < (rmaj, rmin):
        problem = f"the cluster runs {running} and EKS never downgrades a control plane"
        fix = f"set gpufleet:cluster.kubernetesVersion back to {running}"
    else:
        problem = f"the cluster runs {running} and EKS updates a control plane one minor at a time"
        fix = f"deploy {rmaj}.{rmin + 1} first, then {wanted}"
    return [error(SUBJECT, f"{wanted}: {problem}; `pulumi up` would fail half-way", fix)]


def support_findings(minor: str, info: dict[str, Any] | None, now: datetime) -> list[Finding]:
    """From one ClusterVersionInformation: extended support (billed) or its start within SOON, a warning; no
    information (EKS does not list the minor), an error."""
    if info is None:
        return [
            error(
                SUBJECT,
                f"EKS does not list Kubernetes {minor} (eks:DescribeClusterVersions); the deploy would fail at "
                "CreateCluster or UpdateClusterVersion",
                "set gpufleet:cluster.kubernetesVersion to a minor EKS lists",
            )
        ]
    end = info.get("endOfStandardSupportDate")
    end_at = end if isinstance(end, datetime) else None
    ends = f" (standard support ended {end_at:%Y-%m-%d})" if end_at else ""
    upgrade = "plan the next minor upgrade (docs/deploy.md)"
    if info.get("status") == "EXTENDED_SUPPORT" or info.get("versionStatus") == "EXTENDED_SUPPORT":
        return [
            warning(
                SUBJECT,
                f"Kubernetes {minor} is in EKS extended support{ends}: the cluster is billed the extended-support "
                "rate per hour",
                upgrade,
            )
        ]
    if end_at and end_at - now < SOON:
        return [
            warning(
                SUBJECT,
                f"Kubernetes {minor} leaves EKS standard support on {end_at:%Y-%m-%d}: the cluster then moves to "
                "extended support, billed at a higher rate",
                upgrade,
            )
        ]
    return [ok(SUBJECT, f"Kubernetes {minor} is in EKS standard support")]


def check_kubernetes_version(eks: Any, spec: ClusterSpec, now: datetime | None = None) -> list[Finding]:
    wanted = spec.cluster.kubernetes_version
    try:
        running: str | None = str(eks.describe_cluster(name=spec.cluster.name)["cluster"]["version"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            return [api_error(SUBJECT, "eks:DescribeCluster", exc)]
        running = None
    try:
        versions = eks.describe_cluster_versions(clusterVersions=[wanted]).get("clusterVersions", [])
    except ClientError as exc:
        return [*minor_step_findings(running, wanted), api_error(SUBJECT, "eks:DescribeClusterVersions", exc)]
    info = next((v for v in versions if v.get("clusterVersion") == wanted), None)
    return [*minor_step_findings(running, wanted), *support_findings(wanted, info, now or datetime.now(UTC))]
