"""Preflight reads the running cluster's Kubernetes version from EKS (moto's HTTP server on loopback) and
refuses a step of more than one minor, or back, before `pulumi up` reaches UpdateClusterVersion."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.preflight import Severity, run_preflight
from infra.preflight.upgrade import SUBJECT
from tests.conftest import load_example
from tests.preflight.fakeaws import FakeAws
from tests.preflight.helpers import stack_doc, variant
from tests.preflight.test_preflight_moto import by_subject


def _running(aws: FakeAws, name: str, region: str, version: str) -> None:
    aws.client("eks", region).create_cluster(
        name=name,
        version=version,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    aws.eks_regions.add(region)


@pytest.mark.parametrize(
    ("running", "wanted", "severity", "words"),
    [
        (
            "1.34",
            "1.36",
            Severity.ERROR,
            "1.34 -> 1.36 skips a minor; EKS upgrades one minor at a time: deploy 1.35 first",
        ),
        ("1.36", "1.35", Severity.ERROR, "1.35 is older than the deployed 1.36; EKS cannot downgrade"),
        ("1.35", "1.36", Severity.OK, "1.35 -> 1.36: the control plane first, then the node groups"),
    ],
)
def test_the_minor_step_is_read_from_the_running_cluster(
    aws: FakeAws, tmp_path: Path, running: str, wanted: str, severity: Severity, words: str
) -> None:
    doc = stack_doc("example-prod")
    doc["config"]["gpufleet:cluster"]["kubernetesVersion"] = wanted
    spec = variant(tmp_path, "stepped", **doc["config"])
    aws.seed_clean(spec)
    _running(aws, spec.cluster.name, spec.region or "", running)
    found = by_subject(run_preflight(spec), severity)[SUBJECT]
    assert any(words in line for line in found), found
    if severity is Severity.OK:
        assert SUBJECT not in by_subject(run_preflight(spec), Severity.ERROR)


def test_a_new_cluster_has_no_step_to_check(aws: FakeAws) -> None:
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    assert by_subject(run_preflight(spec), Severity.OK)[SUBJECT] == [
        f"a new cluster at {spec.cluster.kubernetes_version}"
    ]
