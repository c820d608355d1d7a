"""The AWS platform's spec rules: each pool's instance types, capacity and zones against the catalog and the
cluster, the system pool and region, and what EKS, the cluster-autoscaler and the provider's roles add.

Run by the composer (`infra.rules`): `aws_cluster_problems` and `aws_pool` before the catalog facts are
resolved, `aws_problems` after. Karpenter's own rules are `infra.aws.karpenter.rules`.
"""

from __future__ import annotations

import difflib
import functools

from infra import catalog
from infra.aws.addons.registries import eks_addon_registry
from infra.aws.karpenter.rules import karpenter_odcr
from infra.aws.scheduler_config import EKS_SCHEDULER_RESOURCES
from infra.gpu_stack.gpu_operator import arm64_gpu_pool_problems
from infra.pools import SYSTEM_GROUP, karpenter_managed, one_zone_pool
from infra.problems import NP, check_sizes, duplicates, suggest
from infra.scheduling import node_group_name
from infra.spec import ClusterSpec, NodePool
from infra.versions import EKS_CHECKED, EKS_KUBERNETES, SUPPORTED_KUBERNETES

MAX_NODE_GROUP_NAME = 63  # EKS limit


def eks_minor_problem(minor: str, key: str = "gpufleet:cluster.kubernetesVersion") -> str | None:
    """One line when EKS does not offer a minor gpufleet supports elsewhere: there is no AMI to pin for it, and a
    cluster asked for it would fail at EKS's CreateCluster, after the plan."""
    if minor not in SUPPORTED_KUBERNETES or minor in EKS_KUBERNETES:
        return None
    return (
        f"{key}: EKS does not list Kubernetes {minor} yet (checked {EKS_CHECKED}); on aws: "
        f"{', '.join(EKS_KUBERNETES)} ({minor} runs on platform existing)"
    )


def aws_cluster_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """The Kubernetes minor (one EKS offers), the region (a real one, with EC2), the cluster's zones in it, and
    the system pool."""
    at = "gpufleet:cluster"
    if minor := eks_minor_problem(spec.cluster.kubernetes_version):
        problems.append(minor)
    if not spec.region:
        problems.append("aws:region: required for platform aws (e.g. us-west-2)")
    elif (known := aws_regions()) and spec.region not in known:
        near = difflib.get_close_matches(spec.region, sorted(known), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        problems.append(f"aws:region: {spec.region!r} is not an AWS region with EC2{hint}")
    else:
        for j, zone in enumerate(spec.cluster.availability_zones or []):
            if not zone.startswith(spec.region):
                problems.append(f"{at}.availabilityZones[{j}]: {zone!r} is not in region {spec.region}")
    _system_pool(spec, problems)


def _system_pool(spec: ClusterSpec, problems: list[str]) -> None:
    sp, at = spec.system_pool, "gpufleet:systemPool"
    itype = catalog.lookup(sp.instance_type)
    if itype is None or itype.gpus:
        problems.append(
            f"{at}.instanceType: {sp.instance_type!r} is not a CPU type in the catalog; "
            f"accepted: {', '.join(catalog.cpu_instance_names())}"
        )
    check_sizes(at, sp.min_size, sp.desired_size, sp.max_size, problems)


def aws_pool(i: int, pool: NodePool, spec: ClusterSpec, problems: list[str]) -> NodePool:
    """One pool's instance type(s), EFA, maxSize, capacity block and zones; returns it with the catalog's GPU model and
    GPUs per node filled in."""
    at = f"{NP}[{i}]"
    for key, value in (
        ("hosts", pool.hosts),
        ("gpuModel", pool.gpu_model),
        ("gpusPerNode", pool.gpus_per_node),
    ):
        if value is not None:
            problems.append(f"{at}.{key}: only for platform existing; on aws it comes from instanceType")
    if pool.instance_types is not None:
        pool = _instance_types(at, pool, problems)
    if pool.instance_type is None:
        if pool.instance_types is None:
            problems.append(
                f"{at}.instanceType: required key is missing (a GPU instance type, e.g. g6e.xlarge)"
            )
        return pool
    itype = catalog.lookup(pool.instance_type)
    if itype is None:
        problems.append(
            f"{at}.instanceType: {pool.instance_type!r} is not in the catalog"
            + suggest(pool.instance_type, catalog.gpu_instance_names())
            + f" (accepted: {', '.join(catalog.gpu_instance_names())})"
        )
        return pool
    if not itype.gpus:
        problems.append(
            f"{at}.instanceType: {itype.name!r} has no GPUs; put CPU capacity in gpufleet:systemPool"
        )
        return pool
    if pool.efa and not itype.efa_interfaces:
        efa_types = [n for n in catalog.gpu_instance_names() if catalog.CATALOG[n].efa_interfaces]
        problems.append(f"{at}.efa: {itype.name} has no EFA interfaces; EFA-capable: {', '.join(efa_types)}")
    if pool.max_size is None:
        problems.append(f"{at}.maxSize: required key is missing")
    _capacity_block(at, pool, spec, problems)
    _zones(at, pool, spec, problems)
    return pool.model_copy(update={"gpu_model": itype.gpu_model, "gpus_per_node": itype.gpus})


def _instance_types(at: str, pool: NodePool, problems: list[str]) -> NodePool:
    """`instanceTypes`: several types of one GPU model and count (EKS managed node groups take a list; Spot
    pools draw on several capacity pools). The flavor is sized from the smallest type, so a quota never
    promises CPU or memory that one of the types lacks."""
    listed = list(pool.instance_types or [])
    if pool.capacity_type == "CAPACITY_BLOCK":
        problems.append(f"{at}.instanceTypes: a capacity block reserves one instance type; use instanceType")
        return pool
    if not listed:
        problems.append(f"{at}.instanceTypes: give at least one GPU instance type, or use instanceType")
        return pool
    for dup in sorted(duplicates(listed)):
        problems.append(f"{at}.instanceTypes: {dup!r} is listed twice")
    # `instanceType` beside `instanceTypes` is one more allowed type (listed first), not a second meaning.
    names = list(dict.fromkeys([*([pool.instance_type] if pool.instance_type else []), *listed]))

    def where(name: str) -> str:
        return f"{at}.instanceTypes[{listed.index(name)}]" if name in listed else f"{at}.instanceType"

    types = []
    for name in names:
        itype = catalog.lookup(name)
        if itype is None or not itype.gpus:
            problems.append(
                f"{where(name)}: {name!r} is not a GPU instance type in the catalog"
                + suggest(name, catalog.gpu_instance_names())
            )
            return pool
        types.append(itype)
    first = types[0]
    for itype in types[1:]:
        if (itype.gpu_model, itype.gpus, itype.arch) != (first.gpu_model, first.gpus, first.arch):
            problems.append(
                f"{where(itype.name)}: {itype.name} has {itype.gpus} x {itype.gpu_model} ({itype.arch}), "
                f"{first.name} has {first.gpus} x {first.gpu_model} ({first.arch}); one pool is one GPU model "
                "and count on one architecture"
            )
        elif pool.efa and itype.efa_interfaces != first.efa_interfaces:
            problems.append(
                f"{where(itype.name)}: {itype.name} has {itype.efa_interfaces} EFA interfaces, "
                f"{first.name} has {first.efa_interfaces}; an EFA pool needs the same count on every type"
            )
    smallest = min(types, key=lambda t: (t.vcpus, t.memory_gib))
    return pool.model_copy(update={"instance_type": smallest.name, "instance_types": names})


def _capacity_block(at: str, pool: NodePool, spec: ClusterSpec, problems: list[str]) -> None:
    if pool.capacity_type == "CAPACITY_BLOCK":
        if not pool.capacity_reservation_id:
            problems.append(
                f"{at}.capacityReservationId: required for CAPACITY_BLOCK (e.g. cr-0123456789abcdef0)"
            )
    elif pool.capacity_reservation_id is not None and not karpenter_odcr(spec, pool):
        # (an On-Demand Capacity Reservation is allowed under Karpenter, which uses it first)
        problems.append(
            f"{at}.capacityReservationId: only for capacityType CAPACITY_BLOCK (got {pool.capacity_type})"
        )


def _zones(at: str, pool: NodePool, spec: ClusterSpec, problems: list[str]) -> None:
    """`availabilityZone` for one-zone pools (required there), `availabilityZones` for the others."""
    cluster_zones = spec.availability_zones
    accepted = f"the cluster's zones: {', '.join(cluster_zones)}"
    if one_zone_pool(pool):
        why = (
            "CAPACITY_BLOCK (the reservation's zone)"
            if pool.capacity_type == "CAPACITY_BLOCK"
            else ("efa pools (a cluster placement group is in one zone)")
        )
        if pool.availability_zones is not None:
            problems.append(f"{at}.availabilityZones: {why} use one zone; set availabilityZone instead")
        if not pool.availability_zone:
            problems.append(f"{at}.availabilityZone: required for {why}; one of {accepted}")
        elif pool.availability_zone not in cluster_zones:
            problems.append(f"{at}.availabilityZone: {pool.availability_zone!r} is not one of {accepted}")
        return
    if pool.availability_zone is not None:
        problems.append(
            f"{at}.availabilityZone: only for capacityType CAPACITY_BLOCK or efa pools; "
            "use availabilityZones for a list"
        )
    if pool.availability_zones is None:
        return
    if not pool.availability_zones:
        problems.append(f"{at}.availabilityZones: give at least one zone, or remove the key")
    for j, zone in enumerate(pool.availability_zones):
        if zone not in cluster_zones:
            where = f"not in region {spec.region}" if not zone.startswith(spec.region or "") else "not"
            problems.append(
                f"{at}.availabilityZones[{j}]: {zone!r} is {where} one of {accepted} "
                "(a pool's nodes use the cluster's subnets)"
            )
    for dup in sorted(duplicates(list(pool.availability_zones))):
        problems.append(f"{at}.availabilityZones: {dup!r} is listed twice")


def aws_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """The AWS rules that read a spec whose catalog facts are resolved."""
    _aws_extra(spec, problems)
    problems += arm64_gpu_pool_problems(spec)


def _eks_scheduler(spec: ClusterSpec, problems: list[str]) -> None:
    """EKS's managed scheduler weighs only some resources (EKS User Guide, "Advanced Kubernetes control plane
    configuration"; API ResourceConstraints); any other name makes CreateCluster fail after the VPC exists."""
    for key in spec.scheduling.placement.weights:
        if key not in EKS_SCHEDULER_RESOURCES:
            problems.append(
                f"gpufleet:scheduling.placement.weights.{key}: EKS's managed scheduler accepts only "
                f"{', '.join(EKS_SCHEDULER_RESOURCES)}; remove it (shared and MIG GPUs are packed by their "
                "nodes' cpu, memory and nvidia.com/gpu)"
            )


def _autoscaler_same_size(spec: ClusterSpec, problems: list[str]) -> None:
    """cluster-autoscaler builds a node group's template from the first instance type of its launch template
    overrides and assumes every type of the group has the same vCPUs and memory (cluster-autoscaler-1.35.2,
    cloudprovider/aws/README.md: "instance types should have the same amount of RAM and number of CPU
    cores"; aws_wrapper.go: the first override). A mixed pool is sized wrong in one direction or the other,
    so its types must agree (Karpenter pools size each type on its own)."""
    for i, pool in enumerate(spec.node_pools):
        if karpenter_managed(spec, pool) or len(pool.instance_types or []) < 2:
            continue
        types = [t for t in map(catalog.lookup, pool.instance_types or []) if t is not None]
        sizes = {(t.vcpus, t.memory_gib) for t in types}
        if len(sizes) > 1:
            listed = ", ".join(f"{t.name} ({t.vcpus} vCPU, {t.memory_gib:g} GiB)" for t in types)
            problems.append(
                f"{NP}[{i}].instanceTypes: the cluster autoscaler sizes a node group from its first type and "
                f"needs every type to have the same vCPUs and memory; got {listed}. Accepted: types with "
                "equal vCPUs and memory (e.g. p5e.48xlarge with p5en.48xlarge), or one type per pool"
            )


def _provider_roles(spec: ClusterSpec, problems: list[str]) -> None:
    """The kubeconfig's exec plugin runs `aws eks get-token --role-arn <role>` with the provider's profile:
    one role, assumed from the profile's credentials, with no external ID (AWS CLI `eks get-token` options).
    The provider applies `aws:assumeRoles` in order (pulumi-aws provider configuration, `assumeRoles`), so
    its identity is the last role; a chain or an external ID would mint a token for another principal, and
    every add-on would fail Unauthorized after the cluster exists."""
    roles = spec.aws_assume_roles
    hint = (
        "put the chain in an AWS CLI profile instead (role_arn, source_profile and external_id in "
        "~/.aws/config, which the provider and the AWS CLI both read) and set aws:profile to it"
    )
    if len(roles) > 1:
        problems.append(
            f"aws:assumeRoles: {len(roles)} roles; the kubeconfig's `aws eks get-token --role-arn` assumes one "
            f"role from the profile's credentials, not a chain. Accepted: at most one role; {hint}"
        )
    for i, role in enumerate(roles):
        if role.external_id:
            problems.append(
                f"aws:assumeRoles[{i}].externalId: `aws eks get-token` (the kubeconfig's exec plugin) cannot "
                f"pass an external ID. Accepted: a role without externalId; {hint}"
            )


def _aws_extra(spec: ClusterSpec, problems: list[str]) -> None:
    """What EKS and the AMI families add to the spec's own rules."""
    _eks_scheduler(spec, problems)
    _autoscaler_same_size(spec, problems)
    _provider_roles(spec, problems)
    if any(p.efa for p in spec.node_pools) and eks_addon_registry(spec.region or "") is None:
        problems.append(
            f"aws:region: the EFA device plugin's image registry for {spec.region!r} is not in "
            "infra/aws/addons/registries.py (EKS User Guide, add-ons-images); add the region's registry there"
        )
    net, at = spec.cluster.network, "gpufleet:cluster.network"
    if net.vpc_id and not net.private_subnet_ids:
        problems.append(f"{at}.privateSubnetIds: required with vpcId (the subnets nodes run in)")
    if not net.vpc_id and (net.private_subnet_ids or net.public_subnet_ids):
        problems.append(f"{at}.vpcId: required when subnet ids are given")
    for i, pool in enumerate(spec.node_pools):
        at = f"{NP}[{i}]"
        if pool.name == SYSTEM_GROUP:
            problems.append(
                f"{at}.name: {SYSTEM_GROUP!r} is the name of the system node group; rename the pool"
            )
        if pool.ami_family == "BOTTLEROCKET_NVIDIA" and pool.sharing.mode != "exclusive":
            problems.append(
                f"{at}.sharing: {pool.sharing.mode} needs the GPU operator's device plugin, which Bottlerocket "
                "nodes do not run (they ship their own); use amiFamily AL2023_NVIDIA for shared GPUs"
            )
        name = node_group_name(spec, pool.name)
        if len(name) > MAX_NODE_GROUP_NAME:
            problems.append(
                f"{at}.name: the node group name {name!r} (<cluster>-<pool>) exceeds EKS's "
                f"{MAX_NODE_GROUP_NAME} characters; shorten the pool or cluster name"
            )


@functools.cache
def aws_regions() -> frozenset[str]:
    """Every region with EC2 in every AWS partition, from botocore's bundled endpoint data (no network), so a
    typo (`us-west-9`) is refused by `invoke plan` rather than by the first API call of a deploy. Read
    through botocore's loader, not a Session: a Session resolves AWS_PROFILE, which is not this check's
    business (a mistyped profile is preflight's one-line error, not a traceback here)."""
    from botocore.loaders import create_loader
    from botocore.regions import EndpointResolver

    resolver = EndpointResolver(create_loader().load_data("endpoints"))
    return frozenset(
        region
        for partition in resolver.get_available_partitions()
        for region in resolver.get_available_endpoints("ec2", partition)
    )
