"""Preflight against moto's HTTP server on loopback: every check, its finding, its fix, its exit code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from infra.errors import CheckFailed
from infra.preflight import Severity, raise_on_errors, run_preflight
from infra.preflight.ami import pool_release
from tests.conftest import load_example
from tests.preflight.fakeaws import FakeAws
from tests.preflight.helpers import invoke, run_task, stack_doc, variant, write_stack

PROD_POOLS = ("h100-train", "l40s-infer", "a10g-batch", "h100-mig")


def by_subject(findings: list, severity: Severity) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in findings:
        if f.severity is severity:
            out.setdefault(f.subject, []).append(f"{f.message} | {f.fix}" if f.fix else f.message)
    return out


def test_clean_example_prod_passes_with_exit_0(aws: FakeAws) -> None:
    aws.seed_clean(load_example("example-prod"))
    result = invoke("preflight", "--stack", "example-prod")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "preflight passed: 0 error(s), 0 warning(s)" in result.stdout
    for pool in PROD_POOLS:
        assert f"pool {pool}" in result.stdout
    for code in ("L-417A185B", "L-DB2E81BA", "L-3819A6DF", "L-1216C47A"):
        assert f"quota {code}" in result.stdout


def test_clean_run_lists_what_it_checked(aws: FakeAws) -> None:
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    findings = run_preflight(spec)
    assert {f.severity for f in findings} == {Severity.OK}
    ok = by_subject(findings, Severity.OK)
    # The capacity-block pool is checked only in its reservation's zone, the others in all three.
    assert "p5.48xlarge is offered in us-east-1a" in ok["pool h100-train"]
    assert "g6e.12xlarge is offered in us-east-1a, us-east-1b, us-east-1c" in ok["pool l40s-infer"]
    # The capacity block draws on no vCPU bucket; the on-demand P pool alone fills L-417A185B.
    assert any("192 needed (pool h100-mig 192)" in m for m in ok["quota L-417A185B"])
    assert any("48 needed (systemPool 48)" in m for m in ok["quota L-1216C47A"])


def test_instance_type_not_offered_in_a_zone(aws: FakeAws, tmp_path: Path) -> None:
    cluster = stack_doc("example-prod")["config"]["gpufleet:cluster"]
    cluster["availabilityZones"] = ["us-east-1a", "us-east-1b", "us-east-1e"]
    spec = variant(tmp_path, "zones", **{"gpufleet:cluster": cluster})
    aws.seed_clean(spec)
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    # moto's offerings data (from AWS): g6e.12xlarge, g5.2xlarge and m6i.2xlarge are not offered in us-east-1e.
    assert set(errors) == {"pool l40s-infer", "pool a10g-batch", "systemPool"}
    message = errors["pool l40s-infer"][0]
    assert message.startswith("g6e.12xlarge is not offered in us-east-1e (offered in: us-east-1a,")
    assert (
        "set the pool's availabilityZones (or gpufleet:cluster.availabilityZones) to zones that offer"
        in message
    )


def test_quota_too_small_names_the_code_and_the_increase_command(aws: FakeAws) -> None:
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    aws.seed_quota("L-DB2E81BA", 96)  # on-demand G: l40s-infer needs 6 x 48 = 288 vCPUs
    aws.seed_quota("L-1216C47A", 32)  # standard: the system pool needs 6 x 8 = 48 vCPUs
    findings = run_preflight(spec)
    errors = by_subject(findings, Severity.ERROR)
    assert set(errors) == {"quota L-DB2E81BA", "quota L-1216C47A"}
    message, fix = errors["quota L-DB2E81BA"][0].split(" | ")
    assert "quota is 96 vCPUs but the pools need 288 at maxSize (pool l40s-infer 288)" in message
    assert fix == (
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA "
        "--desired-value 288 --region us-east-1"
    )
    assert "--quota-code L-1216C47A --desired-value 48 --region us-east-1" in errors["quota L-1216C47A"][0]
    with pytest.raises(CheckFailed, match="2 error"):
        raise_on_errors(findings, spec.stack)


def test_unchanged_quota_falls_back_to_the_aws_default(aws: FakeAws) -> None:
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    del aws.quotas["L-3819A6DF"]  # never changed in this account: only the default exists
    aws.defaults["L-3819A6DF"] = 64
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    assert list(errors) == ["quota L-3819A6DF"]
    assert (
        "quota is 64 vCPUs but the pools need 128 at maxSize (pool a10g-batch 128)"
        in errors["quota L-3819A6DF"][0]
    )


def test_quota_sums_pools_of_one_bucket(aws: FakeAws, tmp_path: Path) -> None:
    pools = stack_doc("example-prod")["config"]["gpufleet:nodePools"]
    pools[3]["maxSize"] = 2  # h100-mig: 2 x 192 on-demand P vCPUs
    pools.append({"name": "h100-extra", "instanceType": "p5.48xlarge", "maxSize": 1})
    spec = variant(tmp_path, "sum", **{"gpufleet:nodePools": pools})
    aws.seed_clean(spec)
    aws.seed_quota("L-417A185B", 384)
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    assert list(errors) == ["quota L-417A185B"]
    assert "need 576 at maxSize (pool h100-mig 384 + pool h100-extra 192)" in errors["quota L-417A185B"][0]


def test_ami_release_missing(aws: FakeAws, tmp_path: Path) -> None:
    spec = variant(tmp_path, "ami", **{"gpufleet:versions": {"al2023NvidiaAmiRelease": "1.35.2-20250101"}})
    aws.seed_clean(load_example("example-prod"))  # publishes the default pins only
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    # The AL2023 pools, and the system pool (its AL2023 standard AMI has the same release string).
    assert set(errors) == {"pool h100-train", "pool a10g-batch", "pool h100-mig", "systemPool"}
    message = errors["pool a10g-batch"][0]
    assert "AL2023_NVIDIA release 1.35.2-20250101 is not published in us-east-1" in message
    assert "amazon-eks-node-al2023-x86_64-nvidia-1.35-v20250101/image_id" in message
    assert "set gpufleet:versions.al2023NvidiaAmiRelease to a published release" in message


def test_bottlerocket_release_found_by_its_bare_version(aws: FakeAws) -> None:
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    infer = spec.pool("l40s-infer")
    release = spec.versions.bottlerocket_nvidia_release or ""
    names = pool_release(spec, infer).parameters
    base = "/aws/service/bottlerocket/aws-k8s-1.35-nvidia/x86_64"
    assert names == (f"{base}/{release}/image_id", f"{base}/{release.split('-')[0]}/image_id")
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import ssm_backends

    del ssm_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]._parameters[names[0]]
    assert list(by_subject(run_preflight(spec), Severity.ERROR)) == ["pool l40s-infer"]
    aws.seed_parameter("us-east-1", names[1])
    assert not by_subject(run_preflight(spec), Severity.ERROR)


def reservation(aws: FakeAws, **changes: object) -> None:
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    aws.reservations["cr-0123456789abcdef0"].update(changes)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"AvailabilityZone": "us-east-1b"},
            "set gpufleet:nodePools[name=h100-train].availabilityZone: us-east-1b",
        ),
        ({"TotalInstanceCount": 2}, "holds 2 instances, the pool's maxSize is 4"),
        ({"InstanceType": "p5e.48xlarge"}, "reserves p5e.48xlarge, the pool asks for p5.48xlarge"),
        ({"State": "cancelled"}, "is cancelled (usable: active, scheduled)"),
        ({"ReservationType": "default"}, "is an On-Demand Capacity Reservation, not a capacity block"),
    ],
)
def test_reservation_that_does_not_fit(aws: FakeAws, changes: dict, expected: str) -> None:
    reservation(aws, **changes)
    errors = by_subject(run_preflight(load_example("example-prod")), Severity.ERROR)
    assert list(errors) == ["pool h100-train"]
    assert expected in errors["pool h100-train"][0]


def test_reservation_missing(aws: FakeAws) -> None:
    reservation(aws)
    aws.reservations.clear()
    errors = by_subject(run_preflight(load_example("example-prod")), Severity.ERROR)
    assert errors["pool h100-train"] == [
        "capacity reservation cr-0123456789abcdef0 not found in us-east-1 | check "
        "gpufleet:nodePools[name=h100-train].capacityReservationId, or find a block with: aws ec2 "
        "describe-capacity-block-offerings --instance-type p5.48xlarge --instance-count 4 "
        "--capacity-duration-hours 24 --region us-east-1"
    ]


def test_denied_api_call_is_a_finding_naming_the_permission(aws: FakeAws) -> None:
    reservation(aws)
    aws.reservations_error = ("UnauthorizedOperation", "You are not authorized to perform this operation.")
    findings = run_preflight(load_example("example-prod"))
    errors = by_subject(findings, Severity.ERROR)
    assert errors == {
        "pool h100-train": [
            "ec2:DescribeCapacityReservations failed: UnauthorizedOperation: You are not authorized to perform "
            "this operation. | allow ec2:DescribeCapacityReservations for these credentials"
        ]
    }
    # The other checks still ran: offerings, quotas, AMIs (system pool too), endpoint, aws CLI, both add-ons,
    # admin role, deploying identity, Kubernetes support, the autoscaler chart's ProvisioningRequest RBAC.
    assert sum(f.severity is Severity.OK for f in findings) == 22


def test_reservation_expired(aws: FakeAws) -> None:
    now = datetime.now(UTC)
    reservation(aws, State="expired", EndDate=now - timedelta(hours=2))
    errors = by_subject(run_preflight(load_example("example-prod")), Severity.ERROR)
    assert any("is expired" in m for m in errors["pool h100-train"])
    assert any("ended at" in m for m in errors["pool h100-train"])


def test_reservation_ending_within_a_day_is_a_warning_and_passes(
    aws: FakeAws, capsys: pytest.CaptureFixture[str]
) -> None:
    reservation(aws, EndDate=datetime.now(UTC) + timedelta(hours=5))
    findings = run_preflight(load_example("example-prod"))
    warnings = by_subject(findings, Severity.WARNING)
    assert not by_subject(findings, Severity.ERROR)
    assert "in 5.0 h" in warnings["pool h100-train"][0] or "in 4.9 h" in warnings["pool h100-train"][0]
    assert (
        "describe-capacity-block-extension-offerings --capacity-reservation-id cr-0123456789abcdef0"
        in (warnings["pool h100-train"][0])
    )
    raise_on_errors(findings, "example-prod")  # warnings alone do not fail
    result = run_task(capsys, "preflight", "--stack", "example-prod")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 error(s), 1 warning(s)" in result.stdout


def test_all_findings_reported_at_once_and_exit_1(
    aws: FakeAws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aws.seed_clean(load_example("example-prod"))
    aws.seed_quota("L-3819A6DF", 64)
    aws.reservations.clear()
    doc = stack_doc("example-prod")
    doc["config"]["gpufleet:versions"] = {"bottlerocketNvidiaRelease": "1.49.0-deadbeef"}
    path = write_stack(tmp_path, "many", doc)
    result = run_task(capsys, "preflight", "--stack", str(path))
    assert result.returncode == 1
    commands = result.stdout.split("commands from the fixes above:\n")[1].splitlines()
    assert (
        "  aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-3819A6DF "
        "--desired-value 128 --region us-east-1"
    ) in commands
    error_rows = [line.split("│")[2].strip() for line in result.stdout.splitlines() if "│ error " in line]
    assert sorted(error_rows) == ["pool h100-train", "pool l40s-infer", "quota L-3819A6DF"]
    assert "preflight FAILED: 3 error(s)" in result.stdout
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error: preflight found 3 error(s) for stack 'many'")


def test_missing_credentials_exit_3_with_one_line(aws: FakeAws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result = invoke("preflight", "--stack", "example-prod")
    assert result.returncode == 3
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: AWS credentials not found: set AWS_PROFILE")


def test_rejected_credentials_exit_3(
    aws: FakeAws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from moto import settings

    aws.seed_clean(load_example("example-prod"))
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto now checks keys like AWS does
    result = run_task(capsys, "preflight", "--stack", "example-prod")
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: AWS rejected the credentials (AuthFailure)")
