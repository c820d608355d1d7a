"""The simulator's cluster from a stack, as the stack deploys it.

The simulator lives in scheduler/sim and knows nothing of specs; this is the one place a spec becomes simulated
nodes and a trace becomes the pods that cluster would see (`invoke simulate --stack NAME`):

- **Pools.** One node per node a GPU pool can grow to (maxSize; hosts on existing clusters), sizes from the
  catalog. A node's simulated "GPU model" is its pool's name, so routing a pod to pools is the simulator's
  model restriction (``gpu_spec``).
- **Taints.** GPU nodes carry ``nvidia.com/gpu=true:NoSchedule``; CPU-only pods cannot land there. They go to
  the system pool (CPU only), sized from ``systemPool`` (maxSize x the instance type) and reported apart:
  the replay measures GPUs.
- **GPU resources.** Exclusive pools expose whole GPUs (``nvidia.com/gpu``); time-sliced pools expose
  ``replicas`` units of ``nvidia.com/gpu.shared`` per GPU, MIG pools their instances of one profile and DRA
  pools (``sharing: dra-shares``) their shares through claims. A fractional request asks the resource whose
  slice is the smallest that covers it, else the largest (:mod:`infra.simulate.share_offers`): one replica or
  MIG instance (the GPU it lands on is the device plugin's choice), worth ``1000 / units`` milli, or the fewest
  DRA shares that cover the ask (the GPU kube-scheduler's: its allocator's first device with room, the
  ``first-fit`` share rule, :mod:`scheduler.fgd.frag`); with no sharing pool it must ask a whole GPU. Either
  way what the trace asked and what the pod gets differ: reported, not hidden, as are the pools no pod is
  routed to, and the routed pods the stack's admission policy refuses as the trace asks them (more cores or
  memory per GPU unit than a node of the pool offers per unit, :mod:`scheduler.gpu_share`), which the replay
  still runs: what a team member does with the refusal is not modelled here.
- **Kueue flavors.** A team's pods are admitted to the flavors (pools) it has quota in, and may borrow the
  cohort's others; trace pods have no team, so a pod may use every pool some team has quota in (all pools
  when no team has quotas).
- **The placement profile as sent.** EKS takes only the NodeResourcesFit strategy and weights for ``cpu``,
  ``memory`` and ``nvidia.com/gpu`` (the EKS ``ScoringStrategy``/``ResourceWeight`` API, weights 1..100), so a
  time-sliced replica is not scored; on existing clusters, and with FragmentationAware on both platforms, the
  secondary scheduler's profile (:func:`scheduler.placement.scoring_resources`) gives shared and MIG resources
  the GPU weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from infra import catalog
from infra.errors import ConfigError
from infra.scheduling import pool_view
from infra.simulate.share_offers import ShareOffer, chosen_offers, restricted, share_offers
from infra.spec import ClusterSpec, NodePool
from scheduler.fgd.frag import ShareRule
from scheduler.fgd.model import MILLI
from scheduler.gpu_share import admits, share_number, unit_shares
from scheduler.model import fit_strategy
from scheduler.resources import gpu_resource
from scheduler.sim import Cluster, Workload

EKS_WEIGHTED = ("cpu", "memory", "nvidia.com/gpu")


@dataclass(frozen=True)
class StackModel:
    """A stack as the simulator replays it."""

    cluster: Cluster  # GPU nodes; gpu_model = pool name
    units: dict[str, int]  # pool -> units per GPU (1 exclusive, replicas, MIG instances, DRA shares)
    routable: tuple[str, ...]  # pools Kueue flavors admit trace pods to
    cpu_pool: tuple[int, int] | None  # (milli-CPU, MiB) of the system pool at maxSize; None: unlimited
    strategy: str
    weights: dict[str, int] = field(default_factory=dict)  # NodeResourcesFit params as sent
    claims: frozenset[str] = frozenset()  # pools whose shares are DRA claims (as many shares as a pod asks)
    gpu_models: dict[str, str] = field(default_factory=dict)  # pool -> its GPU model in the catalog
    resources: dict[str, str] = field(default_factory=dict)  # pool -> the resource a pod asks its GPUs by
    # resource -> (cores, GiB) a pod may ask per unit of it: the stack's admission policy (scheduler.gpu_share)
    shares: dict[str, tuple[float, float]] = field(default_factory=dict)

    def admits(self, resource: str, units: int, cpu_milli: int, memory_mib: int) -> bool:
        """Whether the stack's admission policy lets a pod asking ``units`` of ``resource`` ask these cores and
        memory (a resource with no share, a DRA claim's, is not bounded there)."""
        share = self.shares.get(resource)
        return share is None or admits(share, units, cpu_milli, memory_mib)


@dataclass(frozen=True)
class Routing:
    """What routing a trace to the stack changed."""

    cpu_only_pods: int
    cpu_only_cpu_milli: int
    cpu_only_memory_mib: int
    cpu_pool_fits: bool | None  # the CPU-only pods fit the system pool at once; None: unlimited
    shared_pods: int
    share_pods: tuple[
        tuple[ShareOffer, int], ...
    ]  # each offer the fractions asked, its pods; none: whole GPUs
    unexpressed_milli: int  # milli-GPU asked beyond what the deployed resource gives
    overgiven_milli: int  # milli-GPU given beyond what pods asked
    dropped_specs: int  # pods whose gpu_spec names no model of the stack (the restriction is dropped)
    idle_pools: tuple[str, ...] = ()  # routable pools no GPU pod is routed to
    # routed pods the stack's admission policy refuses as the trace asks them (more cores or memory per GPU unit
    # than its share), per pool they may go to; the replay still runs them
    refused: tuple[tuple[str, int], ...] = ()
    shares: dict[str, tuple[float, float]] = field(default_factory=dict)  # the admission policy's, per unit

    def lines(self) -> list[str]:
        where = (
            "the system pool, whose size this simulation does not limit"
            if self.cpu_pool_fits is None
            else "the system pool, which holds them all at once"
            if self.cpu_pool_fits
            else "the system pool, which could NOT hold them all at once at maxSize (they are left out of the "
            "GPU replay either way)"
        )
        share = (
            "; ".join(_offer_words(offer, pods) for offer, pods in self.share_pods)
            if self.share_pods
            else "a whole GPU (the stack has no time-sliced, MIG or DRA pool)"
        )
        out = [
            f"{self.cpu_only_pods} CPU-only pods ({self.cpu_only_cpu_milli / 1000:.0f} cores, "
            f"{self.cpu_only_memory_mib / 1024:.0f} GiB) go to {where}, not to GPU nodes",
            f"{self.shared_pods} sharing pods take {share}: {self.unexpressed_milli / MILLI:.1f} GPUs asked "
            f"cannot be expressed, {self.overgiven_milli / MILLI:.1f} GPUs given beyond the asks",
            f"{self.dropped_specs} pods name GPU models the stack does not have; their restriction is dropped",
        ]
        if self.refused:
            bound = ", ".join(
                f"{name} {share_number(cores)} cores and {share_number(gib)} GiB"
                for name, (cores, gib) in self.shares.items()
            )
            where = ", ".join(f"{n} for {pools}" for pools, n in self.refused)
            out.append(
                f"{sum(n for _, n in self.refused)} GPU pods ask more cores or memory per GPU unit than the stack's "
                f"admission policy admits ({bound} per unit): {where}. The stack refuses them as the trace asks "
                "them; this replay still runs them"
            )
        if self.idle_pools:
            out.append(
                f"no GPU pod of the trace is routed to {', '.join(self.idle_pools)}: it receives nothing"
            )
        return out


def _offer_words(offer: ShareOffer, pods: int) -> str:
    where = "|".join(offer.pools)
    if offer.claims:
        return (
            f"{pods} the DRA shares of {offer.unit_milli} milli-GPU that cover their asks ({offer.units} per GPU, "
            f"the GPU the allocator's first with room) on {where}"
        )
    return f"{pods} one unit of {offer.unit_milli} milli-GPU ({offer.units} per GPU) of {offer.resource} on {where}"


def _units(pool: NodePool) -> int:
    if pool.sharing.dra_shares:
        return pool.sharing.dra_shares.shares
    if pool.sharing.time_slicing:
        return pool.sharing.time_slicing.replicas
    if pool.sharing.mig and pool.gpu_model:
        return dict(catalog.GPU_MODELS[pool.gpu_model].mig_profiles)[pool.sharing.mig]
    return 1


def placement_profile(spec: ClusterSpec) -> tuple[str, dict[str, int]]:
    """The NodeResourcesFit strategy and the simulator's weight parameters, as the stack sends them.

    FragmentationAware: GPU pods are bound by the secondary scheduler (MostAllocated, every GPU resource
    weighted, as on existing clusters) calling the extender; the extender itself is the ``FGD-Extender``
    policy every stack replay runs, and this profile is what places pods while it is down."""
    p = spec.scheduling.placement
    weights = dict(p.weights)
    gpu = weights.get("nvidia.com/gpu", 10)
    params: dict[str, Any] = {"cpu": weights.get("cpu", 1), "memory": weights.get("memory", 1), "gpu": gpu}
    if spec.platform == "aws" and p.strategy != "FragmentationAware":
        params = {k: v for k, v in params.items() if k in ("cpu", "memory", "gpu")}
        params["shared"] = 0  # EKS has no weight for nvidia.com/gpu.shared: replicas are not scored
    else:
        params["shared"] = weights.get("nvidia.com/gpu.shared", gpu)
    return fit_strategy(p.strategy), params


def _nodes(spec: ClusterSpec, by_pool: bool) -> Cluster:
    """One simulated node per node a pool can grow to (maxSize; hosts on existing clusters); the node's "model"
    is its pool's name (``by_pool``) or its GPU model."""
    names: list[str] = []
    cpu: list[int] = []
    memory: list[int] = []
    gpus: list[int] = []
    models: list[str] = []
    problems: list[str] = []
    for i, pool in enumerate(spec.node_pools):
        if pool.instance_type:
            itype = catalog.CATALOG[pool.instance_type]
            vcpus, mem_gib = itype.vcpus, itype.memory_gib
            hosts = [f"{pool.name}-{n:03d}" for n in range(pool.max_size or 0)]
        else:
            vcpus, mem_gib = pool.cpus_per_node or 0, pool.memory_gi_b_per_node or 0
            hosts = list(pool.hosts or [])
            for key, value in (
                ("cpusPerNode", pool.cpus_per_node),
                ("memoryGiBPerNode", pool.memory_gi_b_per_node),
            ):
                if value is None:
                    problems.append(f"gpufleet:nodePools[{i}].{key}: required to simulate a host group")
        for host in hosts:
            names.append(host)
            cpu.append(vcpus * 1000)
            memory.append(mem_gib * 1024)
            gpus.append(pool.gpus_per_node or 0)
            models.append(pool.name if by_pool else pool.gpu_model or "")
    if problems:
        raise ConfigError(problems)
    return Cluster.build(names, cpu, memory, gpus, models)


def share_rule(model: StackModel) -> ShareRule:
    """Who picks a sharing pod's GPU on the stack: the DRA allocator where the stack's shares are claims, the
    device plugin where they are time-sliced replicas."""
    sharing = [p for p in model.routable if model.units[p] > 1]
    return "first-fit" if sharing and set(sharing) <= model.claims else "distributed"


def stack_model(spec: ClusterSpec) -> StackModel:
    """The stack's GPU nodes (one per node a pool can grow to), routing, CPU pool and placement profile."""
    quota_pools = {p for t in spec.teams for p, q in t.quotas.items() if q > 0}
    routable = tuple(p.name for p in spec.node_pools if not quota_pools or p.name in quota_pools)
    cpu_pool = None
    system = spec.system_pool
    if spec.platform == "aws" and system.instance_type in catalog.CATALOG:
        itype = catalog.CATALOG[system.instance_type]
        cpu_pool = (system.max_size * itype.vcpus * 1000, system.max_size * itype.memory_gib * 1024)
    strategy, weights = placement_profile(spec)
    claims = frozenset(p.name for p in spec.node_pools if p.sharing.dra_shares)
    if routable and set(routable) <= claims:
        # kube-scheduler's NodeResourcesFit counts DRA devices only where a DeviceClass maps them to an extended
        # resource (DRAExtendedResource, kubernetes v1.36.4 pkg/scheduler/framework/plugins/noderesources/fit.go);
        # a claim for shares names no resource, so where every GPU pod claims, the profile scores CPU and memory
        weights = {**weights, "gpu": 0, "shared": 0}
    views = [pool_view(spec, p) for p in spec.node_pools]
    claimed = {gpu_resource(v) for v in views if v.sharing == "draShares"}
    return StackModel(
        shares={r: s for r, s in unit_shares(views).items() if r not in claimed},
        cluster=_nodes(spec, by_pool=True),
        units={p.name: _units(p) for p in spec.node_pools},
        claims=claims,
        gpu_models={p.name: p.gpu_model or "" for p in spec.node_pools},
        resources={v.name: gpu_resource(v) for v in views},
        routable=routable,
        cpu_pool=cpu_pool,
        strategy=strategy,
        weights=weights,
    )


def cluster_from_spec(spec: ClusterSpec) -> Cluster:
    """The stack's GPU nodes with their GPU models (the paper's world: no pools, no routing)."""
    return _nodes(spec, by_pool=False)


def route(model: StackModel, workload: Workload, spec: ClusterSpec) -> tuple[Workload, Routing]:
    """The trace's pods as the stack's cluster sees them: GPU pods routed to pools, CPU-only pods apart.

    A whole-GPU pod may go to every pool that takes whole GPUs; a share to the pools of the resource it asks
    (:func:`infra.simulate.share_offers.chosen_offers`), among those of the GPU model its ``gpu_spec`` names
    where the stack has one, and among those with a node that holds its cores and memory where one does. Which
    of the routed pools it lands in is Kueue's flavor order (the dynamic engine) or the placement policy (the
    static replay)."""
    pool_model = model.gpu_models or {p.name: p.gpu_model or "" for p in spec.node_pools}
    # a DRA pool also takes whole GPUs: a claim for all of a device's shares is the device
    exclusive = [p for p in model.routable if model.units[p] == 1 or p in model.claims]
    offers = share_offers(model.routable, model.units, model.resources, model.claims)
    sharing = [p for o in offers for p in o.pools]
    room: dict[str, tuple[int, int]] = {}  # pool -> its largest node's (milli-CPU, MiB)
    c = model.cluster
    for pool, cpu_milli, mib in zip(c.gpu_model, c.cpu_milli.tolist(), c.memory_mib.tolist(), strict=True):
        had = room.get(pool, (0, 0))
        room[pool] = (max(had[0], cpu_milli), max(had[1], mib))
    cpu_only = workload.num_gpu == 0
    keep = np.flatnonzero(~cpu_only)
    pods = workload.take(keep)
    is_share = (pods.gpu_milli < MILLI).tolist()
    milli = pods.gpu_milli.copy()
    specs: list[str] = []
    dropped = unexpressed = over = 0
    per_offer: dict[ShareOffer, int] = {}
    for i, (share, spec_text) in enumerate(zip(is_share, pods.gpu_spec, strict=True)):
        wanted = {m for m in spec_text.split("|") if m}
        if share and offers:
            asked = int(pods.gpu_milli[i])
            candidates = list(offers)
            if wanted:
                matching = restricted(offers, {p for p in sharing if pool_model[p] in wanted})
                if matching:
                    candidates = matching
                else:
                    dropped += 1
            cpu, memory = int(pods.cpu_milli[i]), int(pods.memory_mib[i])
            hosting = restricted(
                candidates, {p for p in sharing if cpu <= room[p][0] and memory <= room[p][1]}
            )
            chosen = chosen_offers(hosting or candidates, asked)
            for offer in chosen:
                whole = next(o for o in offers if o.resource == offer.resource and o.units == offer.units)
                per_offer[whole] = per_offer.get(whole, 0) + 1
            pools = [p for o in chosen for p in o.pools]
            given = chosen[0].given(asked)
            unexpressed += max(asked - given, 0)
            over += max(given - asked, 0)
            milli[i] = given
            specs.append("|".join(pools))
            continue
        pools = exclusive
        if wanted:
            matching_pools = [p for p in pools if pool_model[p] in wanted]
            if matching_pools:
                pools = matching_pools
            else:
                dropped += 1
        specs.append("|".join(pools) if pools else "(no pool)")
        if share:  # no sharing pool: the fraction asks a whole GPU
            over += MILLI - int(pods.gpu_milli[i])
            milli[i] = MILLI
    routed = replace(pods, gpu_milli=milli, gpu_spec=tuple(specs))
    refused: dict[str, int] = {}
    for text, gpus, given, cpu, memory in zip(
        specs,
        routed.num_gpu.tolist(),
        milli.tolist(),
        routed.cpu_milli.tolist(),
        routed.memory_mib.tolist(),
        strict=True,
    ):
        bounded = [
            model.resources[p] for p in text.split("|") if p in model.resources and p not in model.claims
        ]
        if bounded and not model.admits(bounded[0], gpus if given >= MILLI else 1, cpu, memory):
            refused[text] = refused.get(text, 0) + 1
    c_cpu, c_mem = int(workload.cpu_milli[cpu_only].sum()), int(workload.memory_mib[cpu_only].sum())
    fits = None if model.cpu_pool is None else (c_cpu <= model.cpu_pool[0] and c_mem <= model.cpu_pool[1])
    reached = {p for text in specs for p in text.split("|")}
    return routed, Routing(
        cpu_only_pods=int(cpu_only.sum()),
        cpu_only_cpu_milli=c_cpu,
        cpu_only_memory_mib=c_mem,
        cpu_pool_fits=fits,
        shared_pods=int(sum(is_share)),
        share_pods=tuple((o, per_offer[o]) for o in offers if o in per_offer),
        unexpressed_milli=unexpressed,
        overgiven_milli=over,
        dropped_specs=dropped,
        idle_pools=tuple(p for p in model.routable if p not in reached),
        refused=tuple(refused.items()),
        shares=model.shares,
    )
