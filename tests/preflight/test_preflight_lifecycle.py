"""The cluster's Kubernetes minor against EKS (the loopback server: moto's clusters, DescribeClusterVersions
from fakeaws.py's table): one minor at a time and never down, refused before `pulumi up`; a minor in extended
support, or leaving standard support within 60 days, said as a warning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from infra.preflight import Severity, run_preflight
from infra.preflight.lifecycle import SUBJECT, minor_step_findings
from infra.spec import ClusterSpec
from tests.conftest import load_example
from tests.preflight.fakeaws import FakeAws
from tests.preflight.test_preflight_moto import by_subject


def _prod(aws: FakeAws, running: str | None = None) -> ClusterSpec:
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    if running:
        aws.seed_cluster("us-east-1", spec.cluster.name, running)
    return spec


def test_a_skipped_minor_is_refused(aws: FakeAws) -> None:
    """EKS: "you can't skip minor versions" when updating a control plane; 1.33 -> 1.35 would fail mid-up."""
    spec = _prod(aws, running="1.33")
    assert spec.cluster.kubernetes_version == "1.35"
    (message,) = by_subject(run_preflight(spec), Severity.ERROR)[SUBJECT]
    assert "1.35: the cluster runs 1.33 and EKS updates a control plane one minor at a time" in message
    (finding,) = [f for f in run_preflight(spec) if f.subject == SUBJECT and f.is_error]
    assert finding.fix == "deploy 1.34 first, then 1.35"


def test_a_downgrade_is_refused_and_one_minor_passes(aws: FakeAws) -> None:
    spec = _prod(aws, running="1.36")
    (message,) = by_subject(run_preflight(spec), Severity.ERROR)[SUBJECT]
    assert "EKS never downgrades a control plane" in message
    aws.reset()
    spec = _prod(aws, running="1.34")
    assert SUBJECT not in by_subject(run_preflight(spec), Severity.ERROR)


def test_extended_support_is_a_warning_naming_the_cost(aws: FakeAws) -> None:
    spec = _prod(aws)
    ended = datetime(2026, 3, 1, tzinfo=UTC)
    aws.cluster_versions["1.35"] = {
        "status": "EXTENDED_SUPPORT",
        "endOfStandardSupportDate": ended.timestamp(),
    }
    findings = run_preflight(spec)
    (message,) = by_subject(findings, Severity.WARNING)[SUBJECT]
    assert "1.35 is in EKS extended support (standard support ended 2026-03-01)" in message
    assert "billed the extended-support rate" in message
    soon = datetime.now(UTC) + timedelta(days=20)
    aws.cluster_versions["1.35"] = {
        "status": "STANDARD_SUPPORT",
        "endOfStandardSupportDate": soon.timestamp(),
    }
    (message,) = by_subject(run_preflight(spec), Severity.WARNING)[SUBJECT]
    assert f"leaves EKS standard support on {soon:%Y-%m-%d}" in message


def test_a_minor_eks_does_not_list_is_refused(aws: FakeAws) -> None:
    """DescribeClusterVersions returns no entry for a minor EKS does not offer (as for 1.37 upstream): the
    deploy would fail at CreateCluster, so preflight says so first."""
    spec = _prod(aws)
    del aws.cluster_versions[spec.cluster.kubernetes_version]
    (message,) = by_subject(run_preflight(spec), Severity.ERROR)[SUBJECT]
    assert message.startswith("EKS does not list Kubernetes 1.35 (eks:DescribeClusterVersions)")


def test_one_minor_up_to_the_newest_is_a_step() -> None:
    """1.36 -> 1.37 is one minor; 1.35 -> 1.37 skips one."""
    (step,) = minor_step_findings("1.36", "1.37")
    assert not step.is_error and step.message.startswith("1.36 -> 1.37: one minor")
    (skip,) = minor_step_findings("1.35", "1.37")
    assert skip.is_error and skip.fix == "deploy 1.36 first, then 1.37"
