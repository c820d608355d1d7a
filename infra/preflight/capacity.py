"""Capacity-block pools: the reservation the node group will launch into must exist and fit the pool.

A capacity block is bought for one instance type, one zone, a count and a time window; a pool that disagrees
with any of these gets no nodes, and EKS reports that only as a node group that never scales. So each fact is
compared here, before anything is created, and a block that ends within a day is flagged while there is
still time to extend it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from infra.preflight.checks import api_error, pool_subject
from infra.preflight.findings import Finding, error, ok, warning
from infra.spec import ClusterSpec, NodePool

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

USABLE_STATES = ("active", "scheduled")
ENDING_SOON = timedelta(hours=24)
NOT_FOUND = ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed")


def _where(pool: NodePool) -> str:
    return f"gpufleet:nodePools[name={pool.name}]"


def reservation_findings(
    pool: NodePool, res: dict[str, Any], now: datetime, region: str | None
) -> list[Finding]:
    """Compare one described reservation with the pool that will launch into it."""
    subject, rid, at = pool_subject(pool.name), pool.capacity_reservation_id, _where(pool)
    found: list[Finding] = []
    if res.get("ReservationType", "capacity-block") != "capacity-block":
        found.append(
            error(
                subject,
                f"{rid} is an On-Demand Capacity Reservation, not a capacity block",
                f"give {at}.capacityReservationId a capacity block, or use capacityType ON_DEMAND",
            )
        )
    state = res.get("State", "?")
    if state not in USABLE_STATES:
        found.append(
            error(
                subject,
                f"{rid} is {state} (usable: {', '.join(USABLE_STATES)})",
                f"buy a new capacity block and set {at}.capacityReservationId",
            )
        )
    if res.get("AvailabilityZone") != pool.availability_zone:
        found.append(
            error(
                subject,
                f"{rid} is in {res.get('AvailabilityZone')}, the pool is pinned to {pool.availability_zone}",
                f"set {at}.availabilityZone: {res.get('AvailabilityZone')}",
            )
        )
    if res.get("InstanceType") != pool.instance_type:
        found.append(
            error(
                subject,
                f"{rid} reserves {res.get('InstanceType')}, the pool asks for {pool.instance_type}",
                f"set {at}.instanceType: {res.get('InstanceType')}",
            )
        )
    total = int(res.get("TotalInstanceCount", 0))
    if total < (pool.max_size or 0):
        found.append(
            error(
                subject,
                f"{rid} holds {total} instances, the pool's maxSize is {pool.max_size}",
                f"set {at}.maxSize: {total}, or add a capacity block for the rest",
            )
        )
    found += _window(pool, res, now, region)
    if not found:
        found.append(
            ok(subject, f"{rid}: {state}, {total} x {pool.instance_type} in {pool.availability_zone}")
        )
    return found


def _window(pool: NodePool, res: dict[str, Any], now: datetime, region: str | None) -> list[Finding]:
    end: datetime | None = res.get("EndDate")
    rid, subject = pool.capacity_reservation_id, pool_subject(pool.name)
    if end is None:
        return []
    if end <= now:
        return [error(subject, f"{rid} ended at {end:%Y-%m-%d %H:%M} UTC", "buy a new capacity block")]
    if end - now <= ENDING_SOON:
        hours = (end - now).total_seconds() / 3600
        fix = (
            f"extend it (aws ec2 describe-capacity-block-extension-offerings --capacity-reservation-id {rid} "
            f"--capacity-block-extension-duration-hours 24 --region {region}) or plan for the pool to drain"
        )
        return [warning(subject, f"{rid} ends at {end:%Y-%m-%d %H:%M} UTC, in {hours:.1f} h", fix)]
    return []


def describe_reservations(ec2: EC2Client, rid: str) -> list[dict[str, Any]]:
    """The reservation as a plain dict, or nothing when AWS does not know the id; other API errors are raised.
    Shared by the capacity-block check here and the Karpenter ODCR check (`infra.preflight.karpenter`)."""
    try:
        reply = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in NOT_FOUND:
            return []
        raise
    return [dict(r) for r in reply.get("CapacityReservations", [])]


def check_capacity_blocks(ec2: EC2Client, spec: ClusterSpec, now: datetime) -> list[Finding]:
    """Every CAPACITY_BLOCK pool's reservation exists and fits the pool."""
    findings: list[Finding] = []
    for pool in spec.node_pools:
        if pool.capacity_type != "CAPACITY_BLOCK" or not pool.capacity_reservation_id:
            continue
        rid, subject = pool.capacity_reservation_id, pool_subject(pool.name)
        try:
            reservations = describe_reservations(ec2, rid)
        except ClientError as exc:
            findings.append(api_error(subject, "ec2:DescribeCapacityReservations", exc))
            continue
        if not reservations:
            fix = (
                f"check {_where(pool)}.capacityReservationId, or find a block with: aws ec2 "
                f"describe-capacity-block-offerings --instance-type {pool.instance_type} "
                f"--instance-count {pool.max_size} --capacity-duration-hours 24 --region {spec.region}"
            )
            findings.append(error(subject, f"capacity reservation {rid} not found in {spec.region}", fix))
            continue
        findings += reservation_findings(pool, reservations[0], now, spec.region)
    return findings
