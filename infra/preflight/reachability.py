"""Can the machine that runs the deploy reach the cluster API it is about to create?

Helm releases and the scheduling objects are applied from the deploying machine through the cluster's API
endpoint, after the cluster and its node groups exist (20+ minutes in). If that machine cannot reach the
endpoint, every release times out only then. So preflight decides it up front:

- public endpoint: the deployer's public address must be inside `endpointAccess.publicCidrs` (EKS drops
  everything else; EKS User Guide, "Cluster API server endpoint"). The address is taken from
  `GPUFLEET_DEPLOYER_ADDRESS` when set (a CI runner behind a known NAT, or offline), otherwise asked of
  `https://checkip.amazonaws.com` (which answers with the caller's address and a newline); when neither
  works, preflight says plainly that it cannot know, as a warning.
- private endpoint only: only a network connected to the VPC (VPN, peering, Direct Connect, a runner inside
  it) can reach it, and only through a port-443 rule on the cluster security group. So the spec must name
  that network (`privateAccessCidrs` or `privateAccessSecurityGroupIds`) and the VPC must be one that exists
  and is connected (`network.vpcId`): a VPC this stack creates is connected to nothing when the add-ons go in.
  Configuration alone does not put this machine in that network, so its address in it
  (`GPUFLEET_DEPLOYER_ADDRESS`; an echo service sees only a public one) must be inside `privateAccessCidrs`;
  unstated, preflight says it cannot tell, as a warning.
- a machine that only previews (a CI pull-request runner) never talks to the endpoint: `skipped()` says so in
  place of the check, since such a runner's address is in no allow-list.
"""

from __future__ import annotations

import ipaddress
import os
import urllib.request
from dataclasses import dataclass

from infra.preflight.findings import Finding, error, ok, warning
from infra.spec import ClusterSpec

DEPLOYER_ENV = "GPUFLEET_DEPLOYER_ADDRESS"
CHECKIP_ENV = "GPUFLEET_CHECKIP_URL"  # another address echo service (a proxy's, or a test's)
CHECKIP_URL = "https://checkip.amazonaws.com"
TIMEOUT_S = 3
SUBJECT = "API endpoint"
AT = "gpufleet:cluster.endpointAccess"


@dataclass(frozen=True)
class Deployer:
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    how: str  # where the address came from, or why it is unknown


def stated_address() -> Deployer | None:
    """The address stated in the environment (None when unset)."""
    stated = os.environ.get(DEPLOYER_ENV, "").strip()
    if not stated:
        return None
    try:
        return Deployer(ipaddress.ip_address(stated), f"from {DEPLOYER_ENV}")
    except ValueError:
        return Deployer(None, f"{DEPLOYER_ENV}={stated!r} is not an IP address")


def deployer_for(spec: ClusterSpec) -> Deployer:
    """The address to check: the public one for a public endpoint; for a private one only a stated address,
    because what an echo service sees is the public egress, not this machine's address in the VPC's network."""
    if spec.cluster.endpoint_access.public:
        return deployer_address()
    return stated_address() or Deployer(None, f"is not stated ({DEPLOYER_ENV})")


def skipped() -> Finding:
    """In place of the check on a machine that does not deploy (`invoke preflight --skip-reachability`)."""
    return warning(
        SUBJECT,
        "reachability not checked (--skip-reachability): this machine only previews; the deploying machine "
        "must pass it",
        "run `invoke preflight` without --skip-reachability where `invoke deploy` runs",
    )


def deployer_address() -> Deployer:
    """The deploying machine's public address: stated in the environment, detected online, or unknown."""
    stated = stated_address()
    if stated is not None:
        return stated
    url = os.environ.get(CHECKIP_ENV, CHECKIP_URL)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:
            text = reply.read(64).decode().strip()
        return Deployer(ipaddress.ip_address(text), f"detected via {url}")
    except (OSError, ValueError) as exc:
        return Deployer(None, f"could not be detected ({url}: {exc})")


def check_reachability(spec: ClusterSpec, deployer: Deployer) -> list[Finding]:
    """Whether the deployer can reach the endpoint the spec describes (see the module docstring)."""
    access = spec.cluster.endpoint_access
    if access.public:
        nets = [ipaddress.ip_network(c) for c in access.public_cidrs]
        allowed = ", ".join(access.public_cidrs)
        if deployer.address is None:
            return [
                warning(
                    SUBJECT,
                    f"cannot tell whether this machine can reach the public endpoint: its address {deployer.how}; "
                    f"the endpoint accepts only {allowed}",
                    f"export {DEPLOYER_ENV}=<this machine's public IP> and run preflight again",
                )
            ]
        if any(deployer.address in net for net in nets):
            return [ok(SUBJECT, f"this machine ({deployer.address}, {deployer.how}) is inside {allowed}")]
        suffix = 32 if deployer.address.version == 4 else 128
        return [
            error(
                SUBJECT,
                f"this machine's address {deployer.address} ({deployer.how}) is outside {AT}.publicCidrs "
                f"({allowed}): every Helm release would time out after the cluster is created",
                f"add {deployer.address}/{suffix} (or your network's range) to {AT}.publicCidrs, or deploy from "
                "inside the allowed range",
            )
        ]
    sources = [*access.private_access_cidrs, *access.private_access_security_group_ids]
    if not sources:
        return [
            error(
                SUBJECT,
                "the endpoint is private only and no connected network may reach it: the add-ons could not be "
                "installed from this machine",
                f"set {AT}.public: true with {AT}.publicCidrs including this machine's address, or set "
                f"{AT}.privateAccessCidrs / privateAccessSecurityGroupIds for the VPN or peered network you "
                "deploy from (with gpufleet:cluster.network.vpcId of a VPC routed to it)",
            )
        ]
    if not spec.cluster.network.vpc_id:
        return [
            error(
                SUBJECT,
                "the endpoint is private only, in a VPC this stack creates: no network is connected to that VPC "
                "before the add-ons are installed",
                "set gpufleet:cluster.network.vpcId (and privateSubnetIds) to a VPC your network is routed to, "
                f"or use {AT}.public: true with publicCidrs",
            )
        ]
    return _in_private_network(spec, deployer, sources)


def _in_private_network(spec: ClusterSpec, deployer: Deployer, sources: list[str]) -> list[Finding]:
    """A private endpoint is reached only from the networks of `privateAccessCidrs` (or the security groups,
    whose members an address cannot show): the deployer's stated address must be in one of them."""
    access = spec.cluster.endpoint_access
    where = f"port 443 open to {', '.join(sources)} in {spec.cluster.network.vpc_id}"
    nets = [ipaddress.ip_network(c) for c in access.private_access_cidrs]
    if deployer.address is None:
        return [
            warning(
                SUBJECT,
                f"private endpoint, {where}; cannot tell whether this machine is in that network: its address "
                f"{deployer.how}",
                f"export {DEPLOYER_ENV}=<this machine's address in that network> and run preflight again",
            )
        ]
    if any(deployer.address in net for net in nets):
        return [ok(SUBJECT, f"private endpoint, {where}; this machine ({deployer.address}) is inside")]
    if access.private_access_security_group_ids:
        return [
            warning(
                SUBJECT,
                f"private endpoint, {where}; this machine ({deployer.address}) is in no privateAccessCidrs "
                "range: it reaches the endpoint only as a member of one of those security groups",
                "deploy from an instance in one of those security groups, or from inside privateAccessCidrs",
            )
        ]
    return [
        error(
            SUBJECT,
            f"this machine's address {deployer.address} ({deployer.how}) is outside {AT}.privateAccessCidrs "
            f"({', '.join(access.private_access_cidrs)}): every Helm release would time out after the cluster "
            "is created",
            "deploy from inside that network (a self-hosted runner in it), or add its range to "
            f"{AT}.privateAccessCidrs",
        )
    ]
