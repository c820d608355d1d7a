"""The VPC: private subnets for nodes and the control plane's interfaces, public ones for load balancers.

One private and one public subnet per availability zone, NAT for egress (one gateway, or one per zone so a
zone outage does not cut the others off), and the subnet tags load balancers look for. With `network.vpcId`
the component creates nothing and hands on the given subnets.
"""

from __future__ import annotations

import ipaddress
import math

import pulumi
import pulumi_aws as aws

from infra.aws.karpenter.pools import DISCOVERY_TAG
from infra.aws.tags import common_tags, subnet_tags
from infra.pools import uses_karpenter
from infra.spec import ClusterSpec


def subnet_cidrs(vpc_cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """Split the VPC: one large private block per zone (nodes and pods take many IPs), small public blocks.

    The VPC is cut into 2^k blocks (2^k > zones): the first `zones` are private subnets and the last block is
    cut again into the public subnets.
    """
    vpc = ipaddress.IPv4Network(vpc_cidr)
    bits = max(1, math.ceil(math.log2(zones + 1)))
    blocks = list(vpc.subnets(prefixlen_diff=bits))
    public = list(blocks[-1].subnets(prefixlen_diff=bits))
    return [str(b) for b in blocks[:zones]], [str(b) for b in public[:zones]]


def private_subnet_tags(spec: ClusterSpec) -> dict[str, str]:
    """The private subnets' own tags. Karpenter's discovery tag is one of them when the stack creates the
    subnets: a separate `aws.ec2.Tag` on a subnet whose `tags` this stack also manages is a perpetual diff
    (pulumi-aws `aws.ec2.Tag` docs), and a `pulumi refresh` would then strip it and leave every EC2NodeClass
    with no subnet."""
    cluster = spec.cluster.name
    return {
        **subnet_tags(cluster, public=False),
        **({DISCOVERY_TAG: cluster} if uses_karpenter(spec) else {}),
    }


class Network(pulumi.ComponentResource):
    """`private_subnet_ids` and `private_subnets_by_az` are what node groups and the cluster consume."""

    vpc_id: pulumi.Output[str]
    private_subnet_ids: list[pulumi.Output[str]]
    public_subnet_ids: list[pulumi.Output[str]]

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:aws:Network", name, None, opts)
        self._name = name
        self._spec = spec
        net = spec.cluster.network
        if net.vpc_id:
            self.vpc_id = pulumi.Output.from_input(net.vpc_id)
            self.private_subnet_ids = [pulumi.Output.from_input(s) for s in net.private_subnet_ids]
            self.public_subnet_ids = [pulumi.Output.from_input(s) for s in net.public_subnet_ids]
            self._zones: list[pulumi.Output[str]] = [
                aws.ec2.get_subnet_output(id=s, opts=pulumi.InvokeOptions(parent=self)).availability_zone
                for s in net.private_subnet_ids
            ]
        else:
            self._create()
        self.register_outputs({"vpc_id": self.vpc_id, "private_subnet_ids": self.private_subnet_ids})

    def _create(self) -> None:
        spec, name = self._spec, self._name
        cluster = spec.cluster.name
        tags = common_tags(spec)
        child = pulumi.ResourceOptions(parent=self)
        zones = spec.availability_zones
        private_cidrs, public_cidrs = subnet_cidrs(spec.cluster.network.vpc_cidr, len(zones))
        vpc = aws.ec2.Vpc(
            name,
            cidr_block=spec.cluster.network.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": cluster},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": cluster}, opts=child
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            tags={**tags, "Name": f"{cluster}-public"},
            opts=child,
        )
        public, private = [], []
        for i, zone in enumerate(zones):
            pub = aws.ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                cidr_block=public_cidrs[i],
                availability_zone=zone,
                map_public_ip_on_launch=False,
                tags={**tags, **subnet_tags(cluster, public=True), "Name": f"{cluster}-public-{zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{zone}", subnet_id=pub.id, route_table_id=public_rt.id, opts=child
            )
            public.append(pub)
            private.append(
                aws.ec2.Subnet(
                    f"{name}-private-{zone}",
                    vpc_id=vpc.id,
                    cidr_block=private_cidrs[i],
                    availability_zone=zone,
                    tags={**tags, **private_subnet_tags(spec), "Name": f"{cluster}-private-{zone}"},
                    opts=child,
                )
            )
        # EIPs and NAT gateways need the VPC's internet gateway attached first (the Terraform AWS provider's
        # aws_eip and aws_nat_gateway docs: "use depends_on to set an explicit dependency on the IGW"); the
        # engine cannot see that dependency from their inputs and would otherwise create them in parallel.
        nats = self._nat_gateways(public, tags, pulumi.ResourceOptions(parent=self, depends_on=[igw]))
        for i, (zone, subnet) in enumerate(zip(zones, private, strict=True)):
            nat = nats[i] if len(nats) > 1 else nats[0]
            rt = aws.ec2.RouteTable(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                tags={**tags, "Name": f"{cluster}-private-{zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone}", subnet_id=subnet.id, route_table_id=rt.id, opts=child
            )
        self.vpc_id = vpc.id
        self.private_subnet_ids = [s.id for s in private]
        self.public_subnet_ids = [s.id for s in public]
        self._zones = [pulumi.Output.from_input(z) for z in zones]

    def _nat_gateways(
        self, public: list[aws.ec2.Subnet], tags: dict[str, str], after_igw: pulumi.ResourceOptions
    ) -> list[aws.ec2.NatGateway]:
        per_az = self._spec.cluster.network.nat_gateways == "perAz"
        zones = self._spec.availability_zones if per_az else self._spec.availability_zones[:1]
        nats = []
        for zone, subnet in zip(zones, public, strict=False):
            eip = aws.ec2.Eip(f"{self._name}-nat-{zone}", domain="vpc", tags=tags, opts=after_igw)
            nats.append(
                aws.ec2.NatGateway(
                    f"{self._name}-nat-{zone}",
                    allocation_id=eip.id,
                    subnet_id=subnet.id,
                    tags={**tags, "Name": f"{self._spec.cluster.name}-{zone}"},
                    opts=after_igw,
                )
            )
        return nats

    def private_subnets_in(self, *zones: str) -> pulumi.Output[list[str]]:
        """The private subnet ids in the given zones (a placement group or capacity block lives in one)."""
        pairs = pulumi.Output.all(
            pulumi.Output.all(*self._zones), pulumi.Output.all(*self.private_subnet_ids)
        )
        return pairs.apply(lambda zs: [s for z, s in zip(zs[0], zs[1], strict=True) if z in zones])
