"""Run every preflight check for a stack against the AWS APIs (or whatever AWS_ENDPOINT_URL points at).

boto3 resolves credentials and endpoints the standard way (environment, profiles, SSO, instance roles;
`AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>`), so preflight behaves like any other AWS tool. A missing or
rejected credential stops the run with one line saying what to set; everything else becomes a finding.
"""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from infra.errors import CheckFailed, ToolMissing
from infra.preflight.capacity import check_capacity_blocks
from infra.preflight.checks import REJECTED, check_amis, check_kubeconfig, check_offerings, check_quotas
from infra.preflight.eks import (
    check_admin_roles,
    check_aws_cli,
    check_capacity_block_updates,
    check_monitoring_addon,
)
from infra.preflight.findings import Finding, errors
from infra.preflight.images import Registry, check_images
from infra.preflight.karpenter import check_karpenter_offerings, check_odcrs
from infra.preflight.nvsentinel import check_nvsentinel_prerequisites
from infra.preflight.reachability import Deployer, check_reachability, deployer_for, skipped
from infra.preflight.scheduling import check_existing_cluster, check_provisioning_rbac
from infra.spec import ClusterSpec

CREDENTIALS_HINT = (
    "AWS credentials not found: set AWS_PROFILE (after `aws sso login` or `aws configure`) "
    "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
)
_CONFIG = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=20)


def aws_session(region: str | None) -> boto3.Session:
    """A boto3 session for the spec's region; ToolMissing when no credentials can be found."""
    session = boto3.Session(region_name=region)
    if session.get_credentials() is None:
        raise ToolMissing(CREDENTIALS_HINT)
    return session


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
    if spec.platform == "existing":
        found = check_kubeconfig(spec)
        if errors(found):
            return found
        return (
            found
            + check_existing_cluster(spec)
            + check_nvsentinel_prerequisites(spec)
            + check_images(spec, registry)
        )
    session = session or aws_session(spec.region)
    now = now or datetime.now(UTC)
    ec2 = session.client("ec2", config=_CONFIG)
    eks = session.client("eks", config=_CONFIG)
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
            *check_admin_roles(session.client("iam", config=_CONFIG), spec),
            *check_karpenter_offerings(ec2, spec),
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
