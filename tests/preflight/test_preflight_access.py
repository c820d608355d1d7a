"""Who deploys can reach the cluster: preflight against the loopback AWS server (moto's STS, IAM and EKS, with
ListAccessEntries and the creator's entry modelled in fakeaws.py). Each deployer is a role assumed through
STS, as `aws:assumeRoles` or a CI runner's OIDC role does, so GetCallerIdentity answers an assumed-role ARN."""

from __future__ import annotations

import boto3

from infra.preflight import Severity, run_preflight
from infra.preflight.access import SUBJECT, principal_arn, same_principal
from infra.preflight.run import aws_session
from infra.spec import AwsRole, ClusterSpec
from tests.conftest import load_example
from tests.preflight.fakeaws import FakeAws
from tests.preflight.test_preflight_moto import by_subject

ACCOUNT = "123456789012"


def _as(aws: FakeAws, role: str) -> boto3.Session:
    """A session of `role`, assumed through STS the way preflight takes the stack's identity."""
    arn = f"arn:aws:iam::{ACCOUNT}:role/{role}"
    if role not in aws.iam_roles:
        aws.seed_role(arn)
    return aws_session("us-east-1", roles=[AwsRole(role_arn=arn, session_name="deploy-42")])


def _prod(aws: FakeAws) -> ClusterSpec:
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    return spec


def test_an_assumed_role_stands_for_its_role_whatever_its_path() -> None:
    session = f"arn:aws:sts::{ACCOUNT}:assumed-role/platform-admins/alice@example.com"
    assert principal_arn(session) == f"arn:aws:iam::{ACCOUNT}:role/platform-admins"
    assert same_principal(session, f"arn:aws:iam::{ACCOUNT}:role/teams/platform-admins")
    assert not same_principal(session, "arn:aws:iam::999999999999:role/platform-admins")
    assert not same_principal(
        f"arn:aws:iam::{ACCOUNT}:user/platform-admins", f"arn:aws:iam::{ACCOUNT}:role/platform-admins"
    )


def test_the_deploying_role_listed_as_an_admin_is_refused_on_a_new_cluster(aws: FakeAws) -> None:
    """EKS makes the creator's access entry itself and answers a second one with 409 ResourceInUseException
    after the ~12-minute cluster create (terraform-aws-modules/terraform-aws-eks#2968)."""
    spec = _prod(aws)
    assert spec.cluster.admin_role_arns == [f"arn:aws:iam::{ACCOUNT}:role/platform-admins"]
    (message,) = by_subject(run_preflight(spec, session=_as(aws, "platform-admins")), Severity.ERROR)[SUBJECT]
    assert message.startswith(f"arn:aws:iam::{ACCOUNT}:role/platform-admins, which deploys, is also ")
    assert "gpufleet:cluster.adminRoleArns[0]" in message and "409 ResourceInUseException" in message


def test_another_role_creates_the_new_cluster(aws: FakeAws) -> None:
    spec = _prod(aws)
    findings = run_preflight(spec, session=_as(aws, "ci-deploy"))
    assert SUBJECT not in by_subject(findings, Severity.ERROR)
    (ok,) = [f for f in findings if f.subject == SUBJECT]
    assert f"arn:aws:iam::{ACCOUNT}:role/ci-deploy creates cluster gpufleet-prod" in ok.message


def test_on_an_existing_cluster_only_its_creator_or_a_listed_role_deploys(aws: FakeAws) -> None:
    """The laptop role created the cluster; then the CI role, which nobody listed, deploys: Unauthorized for
    every in-cluster resource, so preflight refuses it. The creator and a listed role pass."""
    spec = _prod(aws)
    aws.seed_cluster("us-east-1", "gpufleet-prod", "1.35", creator=f"arn:aws:iam::{ACCOUNT}:role/laptop")

    (message,) = by_subject(run_preflight(spec, session=_as(aws, "ci-deploy")), Severity.ERROR)[SUBJECT]
    assert (
        f"arn:aws:iam::{ACCOUNT}:role/ci-deploy has no access entry on the existing cluster gpufleet-prod"
        in (message)
    )
    for role in ("laptop", "platform-admins"):
        assert SUBJECT not in by_subject(run_preflight(spec, session=_as(aws, role)), Severity.ERROR), role
