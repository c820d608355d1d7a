"""Preflight on EKS node groups and access entries: a capacity block's launch template changes only while the
group is empty, and admin roles are looked up by their whole ARN, against moto's HTTP server on loopback (see
fakeaws.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.aws.nodepools import LAUNCH_TEMPLATE_TAG
from infra.preflight import Severity, run_preflight
from infra.preflight.eks import check_admin_roles, planned_fingerprint
from infra.scheduling import node_group_name
from infra.spec import ClusterSpec
from tests.conftest import load_example
from tests.preflight.fakeaws import FakeAws
from tests.preflight.helpers import stack_doc, variant
from tests.preflight.test_preflight_moto import by_subject

POOL = "h100-train"  # example-prod's capacity-block pool


def _seed_group(aws: FakeAws, spec: ClusterSpec, desired: int, fingerprint: str) -> None:
    """The capacity-block group as the previous deploy left it: same release and version, its launch template's
    fingerprint on the group (moto's own EKS keeps node group tags)."""
    region = spec.region or ""
    eks = aws.client("eks", region)
    eks.create_cluster(
        name=spec.cluster.name,
        version=spec.cluster.kubernetes_version,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    aws.eks_regions.add(region)
    eks.create_nodegroup(
        clusterName=spec.cluster.name,
        nodegroupName=node_group_name(spec, POOL),
        nodeRole="arn:aws:iam::123456789012:role/node",
        subnets=["subnet-1"],
        scalingConfig={"minSize": 0, "desiredSize": desired, "maxSize": max(desired, 1)},
        capacityType="CAPACITY_BLOCK",
        version=spec.cluster.kubernetes_version,
        releaseVersion=spec.versions.al2023_nvidia_ami_release or "",
        tags={LAUNCH_TEMPLATE_TAG: fingerprint},
    )


@pytest.mark.parametrize(("desired", "refused"), [(2, True), (0, False)])
def test_capacity_block_launch_template_change_refused_while_running(
    aws: FakeAws, tmp_path: Path, desired: int, refused: bool
) -> None:
    """EKS User Guide, "Create a managed node group with Capacity Blocks for ML": a capacity-block group is
    updated only at desired size 0. A larger root volume makes a new launch template version with the same
    AMI release and Kubernetes version, and that rolls the whole block just the same, so the guard compares
    the template's fingerprint, not only release and version."""
    before = load_example("example-prod")
    doc = stack_doc("example-prod")
    pool = next(p for p in doc["config"]["gpufleet:nodePools"] if p["name"] == POOL)
    pool["rootVolumeGiB"] = pool.get("rootVolumeGiB", 200) + 100
    after = variant(tmp_path, "tagged", **doc["config"])
    assert planned_fingerprint(before, POOL) != planned_fingerprint(after, POOL)
    aws.seed_clean(after)
    _seed_group(aws, after, desired, planned_fingerprint(before, POOL) or "")
    findings = run_preflight(after)
    errors = by_subject(findings, Severity.ERROR)
    if refused:
        (message,) = errors[f"pool {POOL}"]
        assert "runs 2 node(s) and would change (launch template" in message
        assert "--scaling-config minSize=0,desiredSize=0" in message
    else:
        assert f"pool {POOL}" not in errors
        assert any(
            "capacity-block group is empty" in m for m in by_subject(findings, Severity.OK)[f"pool {POOL}"]
        )


def test_unchanged_launch_template_passes(aws: FakeAws) -> None:
    """The same template (same fingerprint) at desired > 0 is no update, and passes."""
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    _seed_group(aws, spec, 2, planned_fingerprint(spec, POOL) or "")
    assert f"pool {POOL}" not in by_subject(run_preflight(spec), Severity.ERROR)


def test_admin_role_in_other_account_not_found(aws: FakeAws, tmp_path: Path) -> None:
    """IAM GetRole takes a role *name* and looks in the caller's account only, so a role of the same name in
    the deploying account says nothing about `arn:aws:iam::<other>:role/...`. A STANDARD access entry may name
    another account's role (EKS User Guide, "Create access entries"), so it is not refused, but it is not
    reported as found either: a warning names the other account, which comes from sts:GetCallerIdentity."""
    doc = stack_doc("example-prod")
    other = "arn:aws:iam::210987654321:role/platform-admins"
    doc["config"]["gpufleet:cluster"]["adminRoleArns"] = [other]
    spec = variant(tmp_path, "otheracct", **doc["config"])
    aws.seed_role("arn:aws:iam::123456789012:role/platform-admins")  # same name, deploying account
    iam = aws.client("iam")
    (finding,) = check_admin_roles(iam, spec)
    assert finding.severity is Severity.WARNING, finding
    assert "is in account 210987654321, not the deploying account 123456789012" in finding.message
    assert "gpufleet:cluster.adminRoleArns[0]" in finding.fix


def test_admin_role_path_must_match(aws: FakeAws, tmp_path: Path) -> None:
    """An access entry names the role's whole ARN, path included (EKS User Guide, "Create access
    entries": a role ARN "can include a path"); a role of that name at another path is another principal."""
    doc = stack_doc("example-prod")
    arn = "arn:aws:iam::123456789012:role/teams/platform-admins"
    doc["config"]["gpufleet:cluster"]["adminRoleArns"] = [arn]
    spec = variant(tmp_path, "path", **doc["config"])
    aws.seed_role("arn:aws:iam::123456789012:role/platform-admins")  # created at path /
    (finding,) = check_admin_roles(aws.client("iam"), spec)
    assert finding.severity is Severity.ERROR
    assert f"{arn} does not exist (the account's role platform-admins is " in finding.message
    aws.client("iam").delete_role(RoleName="platform-admins")
    aws.iam_roles.remove("platform-admins")
    aws.client("iam").create_role(RoleName="platform-admins", Path="/teams/", AssumeRolePolicyDocument="{}")
    aws.iam_roles.append("platform-admins")
    (finding,) = check_admin_roles(aws.client("iam"), spec)
    assert finding.severity is Severity.OK and f"{arn} exists" in finding.message
