"""Preflight for Karpenter pools: every allowed instance type is offered where the pool may launch,
On-Demand Capacity Reservations exist and fit the pool (capacity blocks keep their own check), and the EC2 Spot
service-linked role exists where a pool launches Spot.

Karpenter launches an allowed type only in zones that offer it, so a type offered in some of the pool's
zones is a warning (the pool still scales, with fewer choices), and one offered in none of them is an error:
it is dead weight in the NodePool's requirements and, as the only type, a pool that never scales.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from infra.pools import allowed_instance_types, capacity_types, karpenter_pools, zones
from infra.preflight.capacity import USABLE_STATES, describe_reservations
from infra.preflight.checks import api_error, pool_subject
from infra.preflight.findings import Finding, error, ok, warning
from infra.spec import ClusterSpec

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_iam import IAMClient

# EC2 launches Spot only once this role exists, and Karpenter's controller policy may not create it: its
# launches fail with AuthFailure.ServiceLinkedRoleCreationNotPermitted (karpenter-provider-aws v1.14.1
# website/content/en/docs/troubleshooting.md, "Missing Service Linked Role").
SPOT_SERVICE_ROLE = "AWSServiceRoleForEC2Spot"
SPOT_SERVICE_ROLE_FIX = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"


def _offered(ec2: EC2Client, types: list[str]) -> dict[str, set[str]]:
    offered: dict[str, set[str]] = defaultdict(set)
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": types}]
    )
    for page in pages:
        for offering in page["InstanceTypeOfferings"]:
            offered[offering["InstanceType"]].add(offering["Location"])
    return offered


def check_karpenter_offerings(ec2: EC2Client, spec: ClusterSpec) -> list[Finding]:
    """Each allowed type of each Karpenter pool against the pool's zones (one API query for all of them)."""
    pools = karpenter_pools(spec)
    if not pools:
        return []
    types = sorted({t for p in pools for t in allowed_instance_types(p)})
    try:
        offered = _offered(ec2, types)
    except ClientError as exc:
        return [api_error("instance offerings", "ec2:DescribeInstanceTypeOfferings", exc)]
    findings = []
    for pool in pools:
        subject, wanted = pool_subject(pool.name), zones(spec, pool)
        for itype in allowed_instance_types(pool):
            have = [z for z in wanted if z in offered[itype]]
            missing = [z for z in wanted if z not in offered[itype]]
            where = ", ".join(sorted(offered[itype])) or "no zone of this region"
            if not have:
                findings.append(
                    error(
                        subject,
                        f"{itype} is not offered in any of the pool's zones {', '.join(wanted)} (offered in: {where})",
                        f"drop {itype} from gpufleet:nodePools[name={pool.name}] or set its availabilityZones "
                        "to zones that offer it",
                    )
                )
            elif missing:
                findings.append(
                    warning(
                        subject,
                        f"{itype} is not offered in {', '.join(missing)}; Karpenter launches it only in "
                        f"{', '.join(have)}",
                        "nothing to do unless the pool must span every zone",
                    )
                )
            else:
                findings.append(ok(subject, f"{itype} is offered in {', '.join(wanted)}"))
    return findings


def check_odcrs(ec2: EC2Client, spec: ClusterSpec, now: datetime) -> list[Finding]:
    """An On-Demand pool's reservation (an ODCR Karpenter launches into first) exists, is usable, reserves one
    of the pool's types in one of its zones; fewer instances than maxSize is fine (On-Demand takes the rest)."""
    findings: list[Finding] = []
    for pool in karpenter_pools(spec):
        rid = pool.capacity_reservation_id
        if pool.capacity_type != "ON_DEMAND" or not rid:
            continue
        subject, at = pool_subject(pool.name), f"gpufleet:nodePools[name={pool.name}]"
        try:
            found = describe_reservations(ec2, rid)
        except ClientError as exc:
            findings.append(api_error(subject, "ec2:DescribeCapacityReservations", exc))
            continue
        if not found:
            findings.append(
                error(
                    subject,
                    f"capacity reservation {rid} not found in {spec.region}",
                    f"check {at}.capacityReservationId",
                )
            )
            continue
        res, problems = found[0], []
        state = res.get("State", "?")
        if state not in USABLE_STATES:
            problems.append(f"{rid} is {state} (usable: {', '.join(USABLE_STATES)})")
        if res.get("InstanceType") not in allowed_instance_types(pool):
            problems.append(f"{rid} reserves {res.get('InstanceType')}, not one of the pool's instance types")
        if res.get("AvailabilityZone") not in zones(spec, pool):
            problems.append(f"{rid} is in {res.get('AvailabilityZone')}, outside the pool's zones")
        for problem in problems:
            findings.append(
                error(subject, problem, f"give {at}.capacityReservationId a reservation that fits the pool")
            )
        if not problems:
            count = int(res.get("TotalInstanceCount", 0))
            findings.append(
                ok(
                    subject,
                    f"{rid}: {state}, {count} x {res.get('InstanceType')} in {res.get('AvailabilityZone')}",
                )
            )
    return findings


def check_spot_service_role(iam: IAMClient, spec: ClusterSpec) -> list[Finding]:
    """The account's EC2 Spot service-linked role, when a Karpenter pool may launch Spot: without it every Spot
    launch fails and the pool's pods stay Pending. A stack without such a pool makes no call."""
    spot = [p.name for p in karpenter_pools(spec) if "spot" in capacity_types(p)]
    if not spot:
        return []
    subject, pools = "EC2 Spot service-linked role", ", ".join(spot)
    try:
        iam.get_role(RoleName=SPOT_SERVICE_ROLE)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchEntity":
            return [api_error(subject, "iam:GetRole", exc)]
        return [
            error(
                subject,
                f"{SPOT_SERVICE_ROLE} does not exist and Karpenter may not create it: Spot launches for "
                f"{pools} fail with AuthFailure.ServiceLinkedRoleCreationNotPermitted",
                f"create it once per account: {SPOT_SERVICE_ROLE_FIX}",
            )
        ]
    return [ok(subject, f"{SPOT_SERVICE_ROLE} exists (Spot for {pools})")]
