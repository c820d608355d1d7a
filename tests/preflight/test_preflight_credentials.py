"""The identity preflight checks with is the one the stack deploys as.

Real boto3 against moto's HTTP server on loopback: profiles come from a real AWS config file the test writes,
roles are assumed through moto's STS.
"""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from infra.errors import ToolMissing
from infra.preflight.run import aws_session, spec_session
from infra.spec import AwsRole
from tests.preflight.fakeaws import FakeAws
from tests.preflight.helpers import invoke, stack_doc, variant, write_stack


def _profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **profiles: str) -> None:
    """A shared credentials file holding one key pair per named profile (botocore reads it at session time)."""
    text = "".join(
        f"[{name}]\naws_access_key_id = {key}\naws_secret_access_key = secret-{key}\n"
        for name, key in profiles.items()
    )
    (tmp_path / "credentials").write_text(text)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))


def test_mistyped_aws_profile_is_one_line_exit_3(aws: FakeAws, monkeypatch: pytest.MonkeyPatch) -> None:
    """`AWS_PROFILE=nosuch invoke preflight` is one line, exit 3, as the README promises for missing
    credentials, not a traceback: botocore raises ProfileNotFound when the Session is built with a profile no
    config or credentials file holds (botocore `session.py`, `_build_profile_map`)."""
    monkeypatch.setenv("AWS_PROFILE", "nosuch")
    result = invoke("preflight", "--stack", "example-prod")
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "The config profile (nosuch) could not be found (from AWS_PROFILE)" in lines[0]


def test_stack_aws_profile_is_the_identity_preflight_uses(
    aws: FakeAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`aws:profile` in the stack file is the profile preflight uses. The Pulumi AWS provider deploys with its
    `profile` setting, which wins over AWS_PROFILE (pulumi-aws provider configuration, `profile`), so
    preflight takes the same profile: the caller STS reports is the profile's key, not the environment's."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    _profiles(tmp_path, monkeypatch, deployer="AKIADEPLOYER0000001", other="AKIAOTHER000000002")
    monkeypatch.setenv("AWS_PROFILE", "other")
    spec = variant(tmp_path, "withprofile", **{"aws:profile": "deployer"})
    session = spec_session(spec)
    assert session.get_credentials().access_key == "AKIADEPLOYER0000001"
    missing = variant(tmp_path, "badprofile", **{"aws:profile": "nosuch-profile"})
    with pytest.raises(ToolMissing, match=r"nosuch-profile\) could not be found \(from aws:profile"):
        spec_session(missing)


def test_stack_assume_roles_chain_is_applied_in_order(aws: FakeAws, tmp_path: Path) -> None:
    """The provider applies `aws:assumeRoles` in order, each role
    assumed by the identity before it (pulumi-aws provider configuration, `assumeRoles`: "the roles are
    assumed in order"). Preflight follows the same chain through STS, so the identity it checks with is the
    last role's, with the external ID and session name the stack gives."""
    iam = boto3.client("iam", region_name="us-east-1")
    trust = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]}'
    arns = [
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust)["Role"]["Arn"]
        for name in ("hop", "deployer")
    ]
    # A stack refuses a chain and an external ID (the kubeconfig cannot carry them), so the chain
    # is given to the session builder directly.
    roles = (
        AwsRole(role_arn=arns[0]),
        AwsRole(role_arn=arns[1], external_id="x-123", session_name="ci-deploy"),
    )
    caller = aws_session("us-east-1", None, roles).client("sts").get_caller_identity()["Arn"]
    assert caller.endswith(":assumed-role/deployer/ci-deploy"), caller


def test_assume_roles_need_a_role_arn(tmp_path: Path) -> None:
    """Bad input: an `aws:assumeRoles` entry without `roleArn` is named by its key path, exit 2."""
    doc = stack_doc("example-prod")
    doc["config"]["aws:assumeRoles"] = [{"externalId": "x"}]
    write_stack(tmp_path, "norole", doc)
    result = invoke("plan", "--stack", str(tmp_path / "Pulumi.norole.yaml"))
    assert result.returncode == 2, result.stderr
    assert "aws:assumeRoles[0].roleArn: required key is missing" in result.stderr
    assert "Traceback" not in result.stderr
