"""Run every preflight check for a stack against the AWS APIs (or whatever AWS_ENDPOINT_URL points at).

boto3 resolves credentials and endpoints the standard way (environment, profiles, SSO, instance roles;
`AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>`), so preflight behaves like any other AWS tool. A missing or
rejected credential stops the run with one line saying what to set; everything else becomes a finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ProfileNotFound

from infra.errors import CheckFailed, ToolMissing
from infra.preflight.access import check_deployer_access
from infra.preflight.capacity import check_capacity_blocks
from infra.preflight.checks import REJECTED, check_amis, check_kubeconfig, check_offerings, check_quotas
from infra.preflight.eks import (
    check_admin_roles,
    check_aws_cli,
    check_capacity_block_updates,
    check_monitoring_addon,
)
from infra.preflight.findings import Finding, errors, ok
from infra.preflight.images import Registry, check_images
from infra.preflight.karpenter import check_karpenter_offerings, check_odcrs, check_spot_service_role
from infra.preflight.lifecycle import check_kubernetes_version
from infra.preflight.names import check_account_wide_names
from infra.preflight.nvsentinel import check_nvsentinel_prerequisites
from infra.preflight.reachability import Deployer, check_reachability, deployer_for, skipped
from infra.preflight.scheduling import check_existing_cluster, check_provisioning_rbac
from infra.preflight.storage import check_monitoring_storage
from infra.slurm.site import uses_slurm
from infra.spec import AwsRole, ClusterSpec

CREDENTIALS_HINT = (
    "AWS credentials not found: set AWS_PROFILE (after `aws sso login` or `aws configure`) "
    "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
)
_CONFIG = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=20)


def aws_session(
    region: str | None, profile: str | None = None, roles: Sequence[AwsRole] = ()
) -> boto3.Session:
    """A boto3 session with the identity the stack's AWS provider deploys as: the stack's `aws:profile`
    (which the provider prefers to AWS_PROFILE), then each of `aws:assumeRoles` in order (the provider
    applies the chain in order; pulumi-aws provider configuration, `assumeRoles`). ToolMissing (exit 3, one
    line) when a profile does not exist, no credentials can be found, or a role cannot be assumed."""
    try:
        session = boto3.Session(region_name=region, profile_name=profile)
    except ProfileNotFound as exc:
        source = "aws:profile in the stack file" if profile else "AWS_PROFILE"
        raise ToolMissing(
            f"{exc} (from {source}): `aws configure list-profiles` lists the profiles there are; "
            "create it with `aws configure --profile NAME` or `aws configure sso`"
        ) from None
    if session.get_credentials() is None:
        raise ToolMissing(CREDENTIALS_HINT)
    for index, role in enumerate(roles):
        session = _assume(session, region, role, f"aws:assumeRoles[{index}]")
    return session


def spec_session(spec: ClusterSpec) -> boto3.Session:
    """aws_session for a stack: its region, profile and role chain."""
    return aws_session(spec.region, spec.aws_profile, spec.aws_assume_roles)


def _assume(session: boto3.Session, region: str | None, role: AwsRole, key: str) -> boto3.Session:
    kwargs: dict[str, str] = {"RoleArn": role.role_arn, "RoleSessionName": role.session_name or "gpufleet"}
    if role.external_id:
        kwargs["ExternalId"] = role.external_id
    try:
        creds = session.client("sts", config=_CONFIG).assume_role(**kwargs)["Credentials"]
    except NoCredentialsError:
        raise ToolMissing(CREDENTIALS_HINT) from None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise ToolMissing(
            f"{key}: cannot assume {role.role_arn} ({code}): the identity before it in the chain needs "
            "sts:AssumeRole on it, and the role's trust policy must allow that identity"
        ) from None
    except BotoCoreError as exc:
        raise CheckFailed(f"{key}: cannot reach AWS STS to assume {role.role_arn}: {exc}") from None
    return boto3.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        region_name=region,
    )


def run_preflight(
    spec: ClusterSpec,
    session: boto3.Session | None = None,
    now: datetime | None = None,
    deployer: Deployer | None = None,
    registry: Registry | None = None,
    reachability: bool = True,
) -> list[Finding]:
    """Every finding for the stack, errors first; never raises for a finding, only for missing access.
    `reachability=False` on a machine that only previews (it never talks to the cluster endpoint)."""
    if uses_slurm(spec):  # no AWS account, no Kubernetes cluster: `invoke metal --check` checks the hosts
        return [
            ok(
                "gpufleet:cluster.orchestrator",
                "slurm: nothing for preflight to check (it checks an AWS account and a Kubernetes cluster); "
                f"`invoke metal --stack {spec.stack} --check` checks the hosts without changing them",
            )
        ]
    if spec.platform == "existing":
        found = check_kubeconfig(spec)
        if errors(found):
            return found
        return (
            found
            + check_existing_cluster(spec)
            + check_monitoring_storage(spec)
            + check_nvsentinel_prerequisites(spec)
            + check_images(spec, registry)
        )
    session = session or spec_session(spec)
    now = now or datetime.now(UTC)
    ec2 = session.client("ec2", config=_CONFIG)
    eks = session.client("eks", config=_CONFIG)
    iam = session.client("iam", config=_CONFIG)
    try:
        findings = [
            *(check_reachability(spec, deployer or deployer_for(spec)) if reachability else [skipped()]),
            *check_aws_cli(),
            *check_offerings(ec2, spec),
            *check_quotas(session.client("service-quotas", config=_CONFIG), spec),
            *check_amis(session.client("ssm", config=_CONFIG), spec),
            *check_capacity_blocks(ec2, spec, now),
            *check_provisioning_rbac(spec),
            *check_capacity_block_updates(eks, spec),
            *check_monitoring_addon(eks, spec),
            *check_admin_roles(iam, spec, session.client("sts", config=_CONFIG)),
            *check_deployer_access(eks, session.client("sts", config=_CONFIG), spec),
            *check_kubernetes_version(eks, spec, now),
            *check_account_wide_names(eks, iam, spec),
            *check_karpenter_offerings(ec2, spec),
            *check_spot_service_role(iam, spec),
            *check_odcrs(ec2, spec, now),
            *check_images(spec, registry),
        ]
    except NoCredentialsError:
        raise ToolMissing(CREDENTIALS_HINT) from None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in REJECTED:
            raise ToolMissing(
                f"AWS rejected the credentials ({code}): refresh them, e.g. `aws sso login`"
            ) from None
        raise
    except BotoCoreError as exc:
        raise CheckFailed(f"cannot reach the AWS API in {spec.region}: {exc}") from None
    order = {"error": 0, "warning": 1, "ok": 2}
    return sorted(findings, key=lambda f: order[f.severity])


def raise_on_errors(findings: list[Finding], stack: str) -> None:
    """CheckFailed (exit 1) when any finding is an error; warnings pass."""
    failed = errors(findings)
    if failed:
        raise CheckFailed(
            f"preflight found {len(failed)} error(s) for stack {stack!r}; apply the fixes above and run "
            f"`invoke preflight --stack {stack}` again"
        )
