"""The offline plan: what a stack would create and cost, computed from the spec and the catalog alone.

No network, no credentials, no Pulumi: this is what an infra engineer reads before `invoke deploy`.
Costs use On-Demand list prices (catalog) for 730 hours a month; spot and capacity-block pools are priced
at the On-Demand rate as an upper-bound estimate and flagged as such.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from infra import catalog, placement_evidence
from infra.aws.karpenter.plan import dearest, karpenter_rows
from infra.aws.node_room import room_warnings
from infra.pools import allowed_instance_types, karpenter_managed, karpenter_pools, quota_demand
from infra.scheduling import cpu_capacity_warnings, pool_view
from infra.slurm.plan import slurm_accounts
from infra.slurm.site import uses_slurm
from infra.spec import ClusterSpec
from scheduler.checks import warnings as scheduling_warnings


@dataclass(frozen=True)
class PoolPlan:
    name: str
    instance_type: str | None
    gpu_model: str
    gpus_per_node: int
    capacity_type: str
    sharing: str
    min_nodes: int
    max_nodes: int
    min_gpus: int
    max_gpus: int
    vcpus_at_max: int
    quota_code: str | None
    price_per_hour: float | None
    monthly_cost_min: float | None
    monthly_cost_max: float | None
    hosts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    stack: str
    platform: str
    region: str | None
    cluster: str
    kubernetes_version: str
    pools: list[PoolPlan]
    system_pool: dict[str, Any] | None
    quotas: list[dict[str, Any]]
    teams: list[dict[str, Any]]
    totals: dict[str, Any]
    versions: dict[str, Any]
    notes: list[str]
    karpenter: list[dict[str, Any]] = field(default_factory=list)  # NodePools (cluster.autoscaler: karpenter)
    placement: str = ""  # scheduling.placement.strategy: how GPU pods are placed (the plan says so up front)
    # FragmentationAware: what the measured results say for the stack's layouts (infra.placement_evidence)
    placement_verdict: dict[str, Any] | None = None
    orchestrator: str = "kubernetes"  # cluster.orchestrator: what runs the teams' jobs
    slurm: list[dict[str, Any]] = field(default_factory=list)  # accounts and limits (orchestrator slurm)
    slurm_version: str = ""  # gpufleet:slurm.version: the hosts' Slurm release (orchestrator slurm)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _money(value: float) -> float:
    return round(value, 2)


def _pool_plan(spec: ClusterSpec, index: int) -> PoolPlan:
    pool = spec.node_pools[index]
    lo, hi, gpn = pool.min_size or 0, pool.max_size or 0, pool.gpus_per_node or 0
    itype = catalog.lookup(pool.instance_type) if pool.instance_type else None
    if itype is not None and karpenter_managed(spec, pool):
        itype = dearest(allowed_instance_types(pool))  # Karpenter may launch any allowed type
    price = itype.price_per_hour if itype else None
    return PoolPlan(
        name=pool.name,
        instance_type=pool.instance_type,
        gpu_model=pool.gpu_model or "",
        gpus_per_node=gpn,
        capacity_type=pool.capacity_type if spec.platform == "aws" else "HOSTS",
        sharing=pool.sharing.mode,
        min_nodes=lo,
        max_nodes=hi,
        min_gpus=lo * gpn,
        max_gpus=hi * gpn,
        vcpus_at_max=hi * (itype.vcpus if itype else pool.cpus_per_node or 0),
        quota_code=itype.quota_code(pool.capacity_type) if itype else None,
        price_per_hour=price,
        monthly_cost_min=_money(lo * price * catalog.HOURS_PER_MONTH) if price is not None else None,
        monthly_cost_max=_money(hi * price * catalog.HOURS_PER_MONTH) if price is not None else None,
        hosts=list(pool.hosts or []),
    )


def build_plan(spec: ClusterSpec) -> Plan:
    pools = [_pool_plan(spec, i) for i in range(len(spec.node_pools))]
    notes: list[str] = []
    system: dict[str, Any] | None = None
    buckets: dict[str, int] = {}
    karpenter_names = {p.name for p in karpenter_pools(spec)}
    cost_min = sum(p.monthly_cost_min or 0 for p in pools)
    cost_max = sum(p.monthly_cost_max or 0 for p in pools)
    if spec.platform == "aws":
        sp = spec.system_pool
        st = catalog.CATALOG[sp.instance_type]
        hourly = st.price_per_hour or 0.0  # CPU types are all sold On-Demand
        system = {
            "instance_type": sp.instance_type,
            "min_nodes": sp.min_size,
            "max_nodes": sp.max_size,
            "vcpus_at_max": sp.max_size * st.vcpus,
            "quota_code": st.quota_code("ON_DEMAND"),
            "price_per_hour": hourly,
            "monthly_cost_min": _money(sp.min_size * hourly * catalog.HOURS_PER_MONTH),
            "monthly_cost_max": _money(sp.max_size * hourly * catalog.HOURS_PER_MONTH),
        }
        cost_min += system["monthly_cost_min"]
        cost_max += system["monthly_cost_max"]
        entries = [(p.quota_code, p.vcpus_at_max) for p in pools if p.name not in karpenter_names] + [
            (system["quota_code"], system["vcpus_at_max"])
        ]
        entries += [(code, v) for pool in karpenter_pools(spec) for code, v in quota_demand(pool).items()]
        for code, vcpus in entries:
            if code:
                buckets[code] = buckets.get(code, 0) + vcpus
        where = (
            "us-east-1"
            if spec.region == "us-east-1"
            else f"us-east-1's, not {spec.region}'s, which can differ"
        )
        notes.append(
            f"Costs: On-Demand list prices ({where}; Linux) x 730 h; the control plane, NAT and storage are extra."
        )
        if any(p.capacity_type == "SPOT" for p in pools):
            notes.append("SPOT pools are priced at the On-Demand rate: an upper bound.")
        unpriced = [p.name for p in pools if p.price_per_hour is None]
        if unpriced:
            notes.append(
                f"No On-Demand list price (reservation only), left out of the cost: {', '.join(unpriced)}."
            )
        if any(p.capacity_type == "CAPACITY_BLOCK" for p in pools):
            notes.append("CAPACITY_BLOCK pools are prepaid at the reservation rate and use no vCPU quota.")
        for pool in spec.node_pools:
            if pool.capacity_type == "CAPACITY_BLOCK" and (pool.desired_size or 0) > 0:
                notes.append(
                    f"{pool.name}: CAPACITY_BLOCK with desiredSize {pool.desired_size}: EKS updates such a group "
                    "only at desired size 0, so preflight refuses an AMI release or Kubernetes version change "
                    "while it runs nodes; scale it to 0 (after draining) before upgrading."
                )
            if pool.instance_types:
                notes.append(
                    f"{pool.name}: launches any of {', '.join(pool.instance_types)}; costs and quotas use "
                    f"{pool.instance_type} (the smallest)."
                )
    karpenter = karpenter_rows(spec)
    if karpenter:
        notes.append(
            "Karpenter pools start at zero nodes and may launch any allowed type: their maximum is priced at "
            "the dearest allowed type; the Karpenter table gives the range."
        )
    slurm = uses_slurm(spec)
    views = [pool_view(spec, p) for p in spec.node_pools]
    notes += scheduling_warnings(views)
    notes += cpu_capacity_warnings(spec)
    notes += room_warnings(spec, views)
    placed = None if slurm else placement_evidence.verdict(spec)
    if placed is not None:
        notes.append(placed.line)
    if not spec.teams:
        notes.append(
            "No teams (gpufleet:teams): no namespace gets a queue, so no GPU work can be admitted; "
            "add a team per group of users (docs/spec.md)"
        )
    teams = [
        {
            "name": t.name,
            "namespace": t.namespace,
            "priority": t.priority,
            "quotas": dict(t.quotas),
            "borrowing_limit": t.borrowing_limit,
            "lending_limit": t.lending_limit,
        }
        for t in spec.teams
    ]
    totals = {
        "min_gpus": sum(p.min_gpus for p in pools),
        "max_gpus": sum(p.max_gpus for p in pools),
        "monthly_cost_min": _money(cost_min) if spec.platform == "aws" else None,
        "monthly_cost_max": _money(cost_max) if spec.platform == "aws" else None,
    }
    return Plan(
        stack=spec.stack,
        platform=spec.platform,
        region=spec.region,
        cluster=spec.cluster.name,
        kubernetes_version=spec.cluster.kubernetes_version,
        pools=pools,
        system_pool=system,
        quotas=[
            {"code": code, "name": catalog.QUOTA_NAMES[code], "vcpus_at_max": vcpus}
            for code, vcpus in sorted(buckets.items())
        ],
        teams=teams,
        totals=totals,
        versions=spec.versions.model_dump(by_alias=True),
        notes=notes,
        karpenter=karpenter,
        placement="" if slurm else spec.scheduling.placement.strategy,
        placement_verdict=placed.to_json() if placed is not None else None,
        orchestrator=spec.cluster.orchestrator,
        slurm=slurm_accounts(spec) if slurm else [],
        slurm_version=spec.slurm.version if slurm and spec.slurm is not None else "",
    )
