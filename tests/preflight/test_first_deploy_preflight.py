"""Preflight refuses, before anything is created, what a first real deploy would find only after 20 minutes.

Against moto's HTTP server on loopback (fakeaws.py); the address-echo service is a real HTTP server on
loopback answering as https://checkip.amazonaws.com does (the caller's address and a newline).
"""

from __future__ import annotations

import http.server
import ipaddress
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.aws.addons.ebs_csi import ADDON as EBS_CSI_ADDON
from infra.aws.addons.eks_addons import MONITORING_ADDON
from infra.preflight import Severity, run_preflight
from infra.preflight.eks import check_aws_cli
from infra.preflight.reachability import (
    CHECKIP_ENV,
    DEPLOYER_ENV,
    Deployer,
    check_reachability,
    deployer_address,
)
from infra.scheduling import node_group_name
from tests.conftest import load_example
from tests.preflight.fakeaws import FakeAws
from tests.preflight.helpers import run_task, stack_doc, variant, write_stack
from tests.preflight.test_preflight_moto import by_subject


@pytest.fixture
def checkip(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An address echo on loopback, answering like checkip.amazonaws.com: `<address>\\n`."""

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"198.51.100.10\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.HTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/"
    monkeypatch.delenv(DEPLOYER_ENV, raising=False)
    monkeypatch.setenv(CHECKIP_ENV, url)
    yield url
    server.shutdown()


# ---- 2. the deployer reaches the endpoint -------------------------------------------------------------------


def test_deployer_outside_the_public_allow_list_is_refused_with_the_address_to_add(aws: FakeAws) -> None:
    """EKS User Guide, "Cluster API server endpoint": a public endpoint accepts only `publicAccessCidrs`. The
    add-ons are installed from this machine, so outside the list every Helm release would time out after the
    cluster exists."""
    spec = load_example("example-prod")
    found = check_reachability(spec, Deployer(ipaddress.ip_address("192.0.2.50"), "stated"))
    (finding,) = found
    assert finding.severity is Severity.ERROR
    assert "192.0.2.50 (stated) is outside gpufleet:cluster.endpointAccess.publicCidrs (203.0.113.0/24)" in (
        finding.message
    )
    assert finding.fix.startswith("add 192.0.2.50/32")


def test_the_deployers_address_is_detected_online(checkip: str) -> None:
    """With no stated address, preflight asks the echo service (checkip.amazonaws.com's protocol)."""
    deployer = deployer_address()
    assert str(deployer.address) == "198.51.100.10" and checkip in deployer.how


def test_an_unknown_address_is_said_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline and not stated: preflight cannot know, says so, and says how to state it (a warning: the
    deploy may still work)."""
    monkeypatch.delenv(DEPLOYER_ENV, raising=False)
    monkeypatch.setenv(CHECKIP_ENV, "http://127.0.0.1:9/")  # the discard port: nothing answers
    deployer = deployer_address()
    assert deployer.address is None and "could not be detected" in deployer.how
    (finding,) = check_reachability(load_example("example-prod"), deployer)
    assert finding.severity is Severity.WARNING
    assert "cannot tell whether this machine can reach the public endpoint" in finding.message
    assert finding.fix.startswith(f"export {DEPLOYER_ENV}=")


def test_private_only_endpoint_needs_a_connected_network(tmp_path: Path) -> None:
    """EKS User Guide, "Cluster API server endpoint" (private access): only the VPC and networks connected to
    it reach a private endpoint, through a port-443 rule on the cluster security group. A VPC the stack
    creates is connected to nothing when the add-ons go in."""
    cluster = stack_doc("example-prod")["config"]["gpufleet:cluster"]
    no_address = Deployer(None, "not needed")
    cluster["endpointAccess"] = {"public": False}
    (finding,) = check_reachability(variant(tmp_path, "p1", **{"gpufleet:cluster": cluster}), no_address)
    assert finding.severity is Severity.ERROR and "privateAccessCidrs" in finding.fix
    cluster["endpointAccess"] = {"privateAccessCidrs": ["10.8.0.0/16"]}
    (finding,) = check_reachability(variant(tmp_path, "p2", **{"gpufleet:cluster": cluster}), no_address)
    assert finding.severity is Severity.ERROR and "in a VPC this stack creates" in finding.message
    cluster["network"] = {"vpcId": "vpc-0abc", "privateSubnetIds": ["subnet-0a", "subnet-0b", "subnet-0c"]}
    (finding,) = check_reachability(variant(tmp_path, "p3", **{"gpufleet:cluster": cluster}), no_address)
    assert finding.severity is Severity.WARNING and "10.8.0.0/16" in finding.message


def test_a_private_endpoint_needs_this_machine_inside_the_connected_network(tmp_path: Path) -> None:
    """EKS User Guide, "Cluster API server endpoint" (private access): only the networks given a port-443 rule
    reach the endpoint. A configured VPN range does not put this machine in it: a hosted CI runner outside it
    would pass before the cluster exists and fail after. Its stated address must be in the range."""
    cluster = stack_doc("example-prod")["config"]["gpufleet:cluster"]
    cluster["endpointAccess"] = {"privateAccessCidrs": ["10.8.0.0/16"]}
    cluster["network"] = {"vpcId": "vpc-0abc", "privateSubnetIds": ["subnet-0a", "subnet-0b", "subnet-0c"]}
    spec = variant(tmp_path, "p4", **{"gpufleet:cluster": cluster})
    outside = Deployer(ipaddress.ip_address("198.51.100.7"), "stated")
    (finding,) = check_reachability(spec, outside)
    assert finding.severity is Severity.ERROR
    assert "outside gpufleet:cluster.endpointAccess.privateAccessCidrs (10.8.0.0/16)" in finding.message
    (finding,) = check_reachability(spec, Deployer(ipaddress.ip_address("10.8.3.4"), "stated"))
    assert finding.severity is Severity.OK
    cluster["endpointAccess"]["privateAccessSecurityGroupIds"] = ["sg-0123456789abcdef0"]
    (finding,) = check_reachability(variant(tmp_path, "p5", **{"gpufleet:cluster": cluster}), outside)
    assert finding.severity is Severity.WARNING  # a member of the group may still reach it


def test_a_preview_only_machine_skips_the_reachability_check(
    aws: FakeAws, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull-request runner previews and never talks to the endpoint; GitHub-hosted runners' addresses are
    not in any allow-list. `--skip-reachability` replaces the check with a warning; without it, the same
    machine is refused."""
    spec = load_example("dev")
    aws.seed_clean(spec)
    monkeypatch.setenv(DEPLOYER_ENV, "192.0.2.50")
    assert run_task(capsys, "preflight", "--stack", "dev").returncode == 1
    result = run_task(capsys, "preflight", "--stack", "dev", "--skip-reachability")
    assert result.returncode == 0, result.stdout
    assert "--skip-reachability" in result.stdout


def test_dev_deploys_from_a_laptop_after_its_one_documented_edit(
    aws: FakeAws, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """dev ships a public endpoint behind a documentation address (RFC 5737) that its stack file says to
    replace; until then preflight refuses and names the key; after the edit the endpoint check passes."""
    spec = load_example("dev")
    aws.seed_clean(spec)
    monkeypatch.setenv(DEPLOYER_ENV, "192.0.2.50")
    result = run_task(capsys, "preflight", "--stack", "dev")
    assert result.returncode == 1
    assert "gpufleet:cluster.endpointAccess.publicCidrs" in result.stdout
    doc = stack_doc("dev")
    doc["config"]["gpufleet:cluster"]["endpointAccess"]["publicCidrs"] = ["192.0.2.50/32"]
    edited = write_stack(tmp_path, "dev", doc)
    result = run_task(capsys, "preflight", "--stack", str(edited))
    assert result.returncode == 0, result.stdout
    assert "preflight passed: 0 error(s), 0 warning(s)" in result.stdout


# ---- 10. the rest of what creation would find too late -----------------------------------------------------


def test_system_pool_ami_release_must_be_published(aws: FakeAws) -> None:
    """AL2023 standard AMIs are published per release under .../amazon-linux-2023/<arch>/standard/ (SSM public
    parameters, EKS User Guide "Retrieve recommended Amazon Linux AMI IDs"); the system group uses the same
    pinned release as the GPU pools."""
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import ssm_backends

    from infra.preflight.ami import system_release

    del ssm_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]._parameters[system_release(spec).parameters[0]]
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    assert list(errors) == ["systemPool"]
    assert "amazon-eks-node-al2023-x86_64-standard-1.35-v" in errors["systemPool"][0]


def test_node_monitoring_agent_version_must_be_published(aws: FakeAws) -> None:
    """EKS API DescribeAddonVersions lists the versions of an add-on per Kubernetes version; CreateAddon with
    another one fails after the node groups exist."""
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    aws.addon_versions[(MONITORING_ADDON, "1.35")] = ["v1.7.0-eksbuild.1"]
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    (message,) = errors[f"add-on {MONITORING_ADDON}"]
    assert "v1.6.6-eksbuild.1 is not published for Kubernetes 1.35" in message
    assert "gpufleet:versions.nodeMonitoringAgentAddon" in message


def test_ebs_csi_driver_version_must_be_published_when_prometheus_is_installed(aws: FakeAws) -> None:
    """The EBS CSI driver add-on is created with the stack's Prometheus (its volume's provisioner): a version EKS
    does not publish for the minor would fail CreateAddon after the cluster and its nodes exist."""
    spec = load_example("example-prod")
    assert spec.cluster.monitoring.prometheus == "install"
    aws.seed_clean(spec)
    aws.addon_versions[(EBS_CSI_ADDON, "1.35")] = ["v1.63.1-eksbuild.1"]
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    (message,) = errors[f"add-on {EBS_CSI_ADDON}"]
    assert f"{spec.versions.ebs_csi_driver_addon} is not published for Kubernetes 1.35" in message
    assert "gpufleet:versions.ebsCsiDriverAddon" in message
    assert "v1.63.1-eksbuild.1" in message


def test_admin_roles_must_exist(aws: FakeAws) -> None:
    """EKS API CreateAccessEntry refuses a principal that does not exist, after the cluster is created."""
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    aws.client("iam").delete_role(RoleName="platform-admins")
    aws.iam_roles.remove("platform-admins")
    errors = by_subject(run_preflight(spec), Severity.ERROR)
    (message,) = errors["admin roles"]
    assert "arn:aws:iam::123456789012:role/platform-admins does not exist" in message
    assert "gpufleet:cluster.adminRoleArns[0]" in message


def test_the_aws_cli_the_kubeconfig_calls_must_be_installed() -> None:
    """The kubeconfig's exec plugin runs `aws eks get-token` (client.authentication.k8s.io exec credentials);
    without the CLI every add-on fails to authenticate."""
    (finding,) = check_aws_cli(lambda name: None)
    assert finding.severity is Severity.ERROR and "no `aws` on PATH" in finding.message
    (finding,) = check_aws_cli(lambda name: f"/usr/local/bin/{name}")
    assert finding.severity is Severity.OK


# ---- 8. capacity blocks survive upgrades ------------------------------------------------------------------


@pytest.mark.parametrize(("desired", "refused"), [(2, True), (0, False)])
def test_capacity_block_group_changes_version_only_when_empty(
    aws: FakeAws, desired: int, refused: bool
) -> None:
    """EKS User Guide, "Capacity Blocks for ML" (managed node groups): to update a capacity-block group's AMI
    or Kubernetes version, set its desired size to 0 first; a full block has no spare instance to roll onto."""
    spec = load_example("example-prod")
    aws.seed_clean(spec)
    old = "1.35.8-20260801"
    aws.seed_node_group(
        "us-east-1",
        spec.cluster.name,
        node_group_name(spec, "h100-train"),
        version="1.35",
        release=old,
        desired=desired,
    )
    findings = run_preflight(spec)
    errors = by_subject(findings, Severity.ERROR)
    if refused:
        (message,) = errors["pool h100-train"]
        assert (
            f"runs 2 node(s) and would change (release {old} -> {spec.versions.al2023_nvidia_ami_release})"
            in message
        )
        assert "--scaling-config minSize=0,desiredSize=0" in message
    else:
        assert "pool h100-train" not in errors
        assert any(
            "capacity-block group is empty" in m for m in by_subject(findings, Severity.OK)["pool h100-train"]
        )


# ---- 12. per-pool zones and instance types in the offerings check ---------------------------------------


def test_offerings_are_checked_for_every_instance_type_in_the_pools_zones(
    aws: FakeAws, tmp_path: Path
) -> None:
    """EC2 DescribeInstanceTypeOfferings (moto serves AWS's real per-zone data): each type a pool may launch
    must be offered in each zone its group spans; a pool's own zones narrow the check."""
    pools = stack_doc("example-prod")["config"]["gpufleet:nodePools"]
    # one size (the autoscaler's rule), several types: 8 x H200, 192 vCPU and 2 TiB each
    pools[2]["instanceTypes"] = ["p5e.48xlarge", "p5en.48xlarge"]
    del pools[2]["instanceType"]
    pools[1]["availabilityZones"] = ["us-east-1a", "us-east-1b"]
    cluster = stack_doc("example-prod")["config"]["gpufleet:cluster"]
    cluster["availabilityZones"] = ["us-east-1a", "us-east-1b", "us-east-1e"]
    spec = variant(tmp_path, "types", **{"gpufleet:nodePools": pools, "gpufleet:cluster": cluster})
    aws.seed_clean(spec)
    findings = run_preflight(spec)
    errors = by_subject(findings, Severity.ERROR)
    # each type of the spot pool is named with the zones that lack it (moto's us-east-1 offerings: p5e in
    # none, p5en in 1a and 1c only); l40s-infer avoids the pools' third zone
    pool = errors["pool a10g-batch"]
    assert any(
        m.startswith("p5e.48xlarge is not offered in us-east-1a, us-east-1b, us-east-1e") for m in pool
    )
    assert any(m.startswith("p5en.48xlarge is not offered in us-east-1b, us-east-1e") for m in pool)
    assert "pool l40s-infer" not in errors
    assert (
        "g6e.12xlarge is offered in us-east-1a, us-east-1b"
        in by_subject(findings, Severity.OK)["pool l40s-infer"]
    )
