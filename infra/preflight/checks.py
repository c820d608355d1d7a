"""Preflight checks: pure functions over boto3 clients that return findings and never raise for a finding.

Each check makes as few API calls as it can (one offerings query, one quota read per bucket, one batched SSM
read), so a whole run stays well under a few seconds. API errors that are the caller's to fix (a missing IAM
permission) become error findings naming the permission; only connectivity and credential problems abort.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from infra import catalog
from infra.pools import karpenter_managed, pool_zones, quota_demand
from infra.preflight.ami import AmiRelease, pool_release, system_release
from infra.preflight.findings import Finding, error, ok
from infra.spec import ClusterSpec

if TYPE_CHECKING:  # type stubs only (boto3-stubs); boto3 clients are built at run time
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_service_quotas import ServiceQuotasClient
    from mypy_boto3_ssm import SSMClient

SYSTEM = "systemPool"


def pool_subject(name: str) -> str:
    return f"pool {name}"


# Error codes AWS returns for missing, wrong or expired keys: these abort the run (exit 3), not a finding.
REJECTED = {
    "AuthFailure",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
}


def api_error(subject: str, action: str, exc: ClientError) -> Finding:
    """An API call the credentials may not make becomes a finding; rejected credentials re-raise."""
    code = exc.response.get("Error", {}).get("Code", "?")
    if code in REJECTED:
        raise exc
    message = exc.response.get("Error", {}).get("Message", str(exc))
    return error(subject, f"{action} failed: {code}: {message}", f"allow {action} for these credentials")


def _wanted_zones(spec: ClusterSpec) -> list[tuple[str, str, list[str]]]:
    """(subject, instance type, zones) for every type every pool launches, system pool included."""
    rows = [(SYSTEM, spec.system_pool.instance_type, spec.availability_zones)]
    for pool in spec.node_pools:
        if karpenter_managed(spec, pool):
            continue  # every allowed type, in the pool's zones: infra.preflight.karpenter
        zones = list(pool_zones(spec, pool))
        for itype in pool.instance_types or [pool.instance_type or ""]:
            rows.append((pool_subject(pool.name), itype, zones))
    return rows


def check_offerings(ec2: EC2Client, spec: ClusterSpec) -> list[Finding]:
    """Every pool's instance type is offered in each zone its node group spans."""
    rows = _wanted_zones(spec)
    types = sorted({itype for _, itype, _ in rows})
    offered: dict[str, set[str]] = defaultdict(set)
    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": types}]
        )
        for page in pages:
            for offering in page["InstanceTypeOfferings"]:
                offered[offering["InstanceType"]].add(offering["Location"])
    except ClientError as exc:
        return [api_error("instance offerings", "ec2:DescribeInstanceTypeOfferings", exc)]
    findings = []
    for subject, itype, zones in rows:
        missing = [z for z in zones if z not in offered[itype]]
        if not missing:
            findings.append(ok(subject, f"{itype} is offered in {', '.join(zones)}"))
            continue
        where = ", ".join(sorted(offered[itype])) or "no zone of this region"
        fix = (
            f"set the pool's availabilityZone to a zone that offers {itype} ({where})"
            if len(zones) == 1 and subject != SYSTEM
            else f"set the pool's availabilityZones (or gpufleet:cluster.availabilityZones) to zones that "
            f"offer {itype} ({where}), or choose another instance type"
        )
        findings.append(
            error(subject, f"{itype} is not offered in {', '.join(missing)} (offered in: {where})", fix)
        )
    return findings


def vcpu_demand(spec: ClusterSpec) -> dict[str, list[tuple[str, int]]]:
    """Quota code -> (subject, vCPUs at maxSize) for every pool that draws on a vCPU quota bucket."""
    demand: dict[str, list[tuple[str, int]]] = defaultdict(list)
    system = catalog.lookup(spec.system_pool.instance_type)
    if system is not None:
        code = system.quota_code("ON_DEMAND")
        if code:
            demand[code].append((SYSTEM, spec.system_pool.max_size * system.vcpus))
    for pool in spec.node_pools:
        if karpenter_managed(spec, pool):  # the largest allowed type, in every bucket the pool draws on
            for code, vcpus in quota_demand(pool).items():
                demand[code].append((pool_subject(pool.name), vcpus))
            continue
        itype = catalog.lookup(pool.instance_type or "")
        code = itype.quota_code(pool.capacity_type) if itype else None
        if itype is not None and code:
            demand[code].append((pool_subject(pool.name), (pool.max_size or 0) * itype.vcpus))
    return dict(demand)


def _quota_value(sq: ServiceQuotasClient, code: str) -> float:
    """The applied quota, or the AWS default when the account never changed it."""
    try:
        return float(sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchResourceException":
            raise
    return float(sq.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])


def check_quotas(sq: ServiceQuotasClient, spec: ClusterSpec) -> list[Finding]:
    """Each vCPU quota bucket covers the summed maximum vCPUs of the pools that draw on it."""
    findings = []
    for code, users in sorted(vcpu_demand(spec).items()):
        subject = f"quota {code}"
        need = sum(v for _, v in users)
        breakdown = " + ".join(f"{s} {v}" for s, v in users)
        name = catalog.QUOTA_NAMES.get(code, code)
        try:
            value = _quota_value(sq, code)
        except ClientError as exc:
            findings.append(api_error(subject, "servicequotas:GetServiceQuota", exc))
            continue
        if value >= need:
            findings.append(ok(subject, f"{name}: {value:g} vCPUs cover the {need} needed ({breakdown})"))
            continue
        fix = (
            f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
            f"--desired-value {need} --region {spec.region}"
        )
        findings.append(
            error(
                subject,
                f"{name}: quota is {value:g} vCPUs but the pools need {need} at maxSize ({breakdown})",
                fix,
            )
        )
    return findings


def _ami_finding(subject: str, ami: AmiRelease, published: set[str], region: str | None) -> Finding:
    what = f"{ami.family} release {ami.release}"
    browse = (
        f"aws ssm get-parameters-by-path --path {ami.browse} --region {region} --query 'Parameters[].Name'"
    )
    if ami.problem:
        return error(
            subject, f"{what}: {ami.problem}", f"set {ami.version_key} to a published release ({browse})"
        )
    if published.intersection(ami.parameters):
        return ok(subject, f"{what} is published in {region}")
    return error(
        subject,
        f"{what} is not published in {region} (no SSM parameter {ami.parameters[0]})",
        f"set {ami.version_key} to a published release; list them with: {browse}",
    )


def check_amis(ssm: SSMClient, spec: ClusterSpec) -> list[Finding]:
    """The pinned AMI release of every GPU pool and of the system pool is published in the region."""
    releases = [(SYSTEM, system_release(spec))]
    releases += [(pool_subject(p.name), pool_release(spec, p)) for p in spec.node_pools]
    names = sorted({n for _, ami in releases for n in ami.parameters})
    published: set[str] = set()
    try:
        for start in range(0, len(names), 10):  # GetParameters takes at most 10 names
            reply = ssm.get_parameters(Names=names[start : start + 10])
            published.update(p["Name"] for p in reply["Parameters"])
    except ClientError as exc:
        return [api_error("AMI releases", "ssm:GetParameters", exc)]
    return [_ami_finding(subject, ami, published, spec.region) for subject, ami in releases]


def check_kubeconfig(spec: ClusterSpec) -> list[Finding]:
    """An existing cluster has nothing to check on AWS; its kubeconfig must at least be there."""
    path = Path(spec.cluster.kubeconfig or "").expanduser()
    subject = "gpufleet:cluster.kubeconfig"
    if spec.cluster.kubeconfig and path.is_file():
        return [ok(subject, f"platform existing: nothing to check on AWS; kubeconfig {path} is present")]
    return [
        error(subject, f"kubeconfig {path} does not exist", "point gpufleet:cluster.kubeconfig at the file")
    ]
