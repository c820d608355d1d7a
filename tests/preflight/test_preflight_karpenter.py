"""Preflight of a Karpenter stack against moto's HTTP server: offerings of every allowed type in each pool's
zones, vCPU quotas for the largest allowed type in every bucket a pool draws on, On-Demand Capacity
Reservations (capacity blocks keep the existing check), and the EC2 Spot service-linked role."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from infra import catalog
from infra.preflight import Severity, run_preflight
from infra.preflight.checks import vcpu_demand
from infra.preflight.karpenter import SPOT_SERVICE_ROLE, check_spot_service_role
from tests.conftest import load_example
from tests.preflight.fakeaws import FakeAws
from tests.preflight.helpers import invoke, stack_doc, variant
from tests.preflight.test_preflight_moto import by_subject

STACK = "example-karpenter"
ODCR = "cr-0fedcba9876543210"


def seed(aws: FakeAws, spec: Any, **odcr: Any) -> None:
    """What the stack needs to pass, plus the inference pool's ODCR (moto has no capacity reservations)."""
    aws.seed_clean(spec)
    now = datetime.now(UTC)
    fields = {
        "InstanceType": "g6e.12xlarge",
        "AvailabilityZone": "us-east-1b",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "State": "active",
        "ReservationType": "default",
        "StartDate": now - timedelta(days=30),
        **odcr,
    }
    aws.seed_reservation(ODCR, **fields)


def test_clean_karpenter_stack_passes(aws: FakeAws) -> None:
    spec = load_example(STACK)
    seed(aws, spec)
    result = invoke("preflight", "--stack", STACK)
    assert result.returncode == 0, result.stdout + result.stderr
    ok = by_subject(run_preflight(spec), Severity.OK)
    # Every allowed type, each in the pool's own zones.
    for itype in ("g5.2xlarge", "g5.4xlarge", "g5.8xlarge"):
        assert f"{itype} is offered in us-east-1b, us-east-1c" in ok["pool a10g-spot"]
    assert "g6e.24xlarge is offered in us-east-1a, us-east-1b, us-east-1c" in ok["pool l40s-infer"]
    assert any(m.startswith(f"{ODCR}: active, 2 x g6e.12xlarge in us-east-1b") for m in ok["pool l40s-infer"])


def test_quotas_cover_the_largest_allowed_type_in_every_bucket() -> None:
    """A spot pool that falls back to On-Demand draws on both G buckets (Spot L-3819A6DF, On-Demand
    L-DB2E81BA), at maxSize x the largest allowed type; an ODCR's instances count against On-Demand limits
    (EC2 User Guide, "Capacity Reservations"); a capacity block draws on none."""
    demand = {code: dict(users) for code, users in vcpu_demand(load_example(STACK)).items()}
    largest = catalog.CATALOG["g5.8xlarge"].vcpus
    assert demand["L-3819A6DF"]["pool a10g-spot"] == 8 * largest
    assert demand["L-DB2E81BA"]["pool a10g-spot"] == 8 * largest
    assert demand["L-DB2E81BA"]["pool l40s-infer"] == 6 * catalog.CATALOG["g6e.24xlarge"].vcpus
    assert all("pool h100-train" not in users for users in demand.values())


def test_short_quota_names_the_karpenter_pools(aws: FakeAws) -> None:
    spec = load_example(STACK)
    seed(aws, spec)
    aws.seed_quota("L-3819A6DF", 100)
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    assert list(errors) == ["quota L-3819A6DF"]
    assert "pool a10g-spot 256" in errors["quota L-3819A6DF"][0]


def test_type_offered_in_none_of_the_pools_zones_is_an_error(aws: FakeAws, tmp_path: Path) -> None:
    """moto's offerings data (from AWS): neither g5.2xlarge nor g6e.12xlarge is offered in us-east-1e (see
    test_preflight_moto)."""
    cluster = stack_doc(STACK)["config"]["gpufleet:cluster"]
    cluster["availabilityZones"] = ["us-east-1a", "us-east-1b", "us-east-1e"]
    node_pools = stack_doc(STACK)["config"]["gpufleet:nodePools"]
    node_pools[2]["availabilityZones"] = ["us-east-1e"]
    node_pools[1].pop("capacityReservationId")
    wide = variant(
        tmp_path, "east-1e", base=STACK, **{"gpufleet:cluster": cluster, "gpufleet:nodePools": node_pools}
    )
    aws.seed_clean(wide)
    errors = by_subject(run_preflight(wide), Severity.ERROR)
    warnings = by_subject(run_preflight(wide), Severity.WARNING)
    assert any(
        "g5.2xlarge is not offered in any of the pool's zones us-east-1e" in e
        for e in errors["pool a10g-spot"]
    )
    # l40s-infer spans the three zones: missing in one is a warning, Karpenter launches where offered.
    assert any("g6e.12xlarge is not offered in us-east-1e" in w for w in warnings["pool l40s-infer"])


def test_odcr_that_does_not_fit_the_pool(aws: FakeAws) -> None:
    spec = load_example(STACK)
    seed(aws, spec, InstanceType="g5.2xlarge", State="expired")
    errors = by_subject(run_preflight(spec), Severity.ERROR)["pool l40s-infer"]
    assert any("reserves g5.2xlarge, not one of the pool's instance types" in e for e in errors)
    assert any("is expired" in e for e in errors)


def test_missing_odcr(aws: FakeAws) -> None:
    spec = load_example(STACK)
    aws.seed_clean(spec)
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    assert any(f"capacity reservation {ODCR} not found" in e for e in errors["pool l40s-infer"])


SPOT_ROLE = "EC2 Spot service-linked role"


def test_spot_service_role_present_passes(aws: FakeAws) -> None:
    spec = load_example(STACK)
    seed(aws, spec)
    ok = by_subject(run_preflight(spec), Severity.OK)
    assert ok[SPOT_ROLE] == [f"{SPOT_SERVICE_ROLE} exists (Spot for a10g-spot)"]


def test_missing_spot_service_role_is_an_error_with_the_create_command(aws: FakeAws) -> None:
    """A fresh account has no AWSServiceRoleForEC2Spot, and Karpenter's controller policy cannot create it:
    Spot launches fail (karpenter-provider-aws v1.14.1 docs, troubleshooting, "Missing Service Linked Role")."""
    spec = load_example(STACK)
    seed(aws, spec)
    aws.client("iam").delete_role(RoleName=SPOT_SERVICE_ROLE)
    aws.iam_roles.remove(SPOT_SERVICE_ROLE)
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    assert list(errors) == [SPOT_ROLE]
    (message,) = errors[SPOT_ROLE]
    assert "for a10g-spot fail" in message and "ServiceLinkedRoleCreationNotPermitted" in message
    assert message.endswith("aws iam create-service-linked-role --aws-service-name spot.amazonaws.com")


class RecordingIam:
    """An IAM client that records each call and answers none (a missing role)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def get_role(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        self.calls.append(("GetRole", kwargs))
        raise ClientError({"Error": {"Code": "NoSuchEntity", "Message": "not found"}}, "GetRole")


def test_stack_without_karpenter_spot_pools_makes_no_spot_role_call() -> None:
    """example-prod launches Spot through a managed node group (EC2 Auto Scaling creates the role itself), not
    through Karpenter: nothing to check and no call."""
    iam = RecordingIam()
    assert check_spot_service_role(iam, load_example("example-prod")) == []  # type: ignore[arg-type]
    assert iam.calls == []
    findings = check_spot_service_role(iam, load_example(STACK))  # type: ignore[arg-type]
    assert iam.calls == [("GetRole", {"RoleName": SPOT_SERVICE_ROLE})] and findings[0].is_error
