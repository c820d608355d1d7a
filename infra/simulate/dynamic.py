"""A stack's cluster and policy as the dynamic simulation replays them.

The one place a spec becomes a :class:`scheduler.sim.dynamic.World` (`invoke simulate --dynamic`):

- **Nodes and routing** are the placement replay's (:mod:`infra.simulate.stack`): one node per node a pool can grow
  to, a pod routed to the pools whose resource expresses its request (a share to the resource whose slice
  covers its fraction, :mod:`infra.simulate.share_offers`), the pool among them the queue's flavor order;
  CPU-only pods leave the GPU replay.
- **Queues** are read from the stack's compiled ClusterQueues (:func:`scheduler.compile`), never restated:
  every GPU ClusterQueue as its own queue, the flavors of its GPU resource group in their order, and for each
  the nominal quota, borrowing and lending limit of the pool's GPU resource. A job goes to the LocalQueue
  the trace's ``queue`` column names (``default``, or ``topology`` for ``<team>-topology``); where the trace
  names none, to its team's ``default`` queue when that queue holds quota on a pool that can hold the job's
  pod, else to the team's topology queue when that one does (a training team whose only GPUs are a capacity
  block submits its work there), else ``default`` (:func:`scheduler.sim.dynamic.routing.own_queue`). Only
  jobs in a topology queue reach a topology pool, as in Kueue.
- **Priorities** are the stack's WorkloadPriorityClass values; a trace row's `priority` names one, otherwise a
  job has its team's default class.
- **Teams**: a trace's `team` column, or else each job is given to a team at random (seeded), in proportion to
  the teams' GPU quota counted in GPUs (a MIG slice or a time-sliced replica is its fraction of a GPU, not
  one), so every team sees load in line with the GPUs it was promised.
- **Kueue settings**: `waitForPodsReady.timeout` from the stack; preemption as compiled (`reclaimWithinCohort:
  Any`, `withinClusterQueue: LowerPriority`), BestEffortFIFO; with the stack's `fairSharing` (on by default)
  Kueue's fair sharing over the compiled cohort tree (each queue's team Cohort and its weight, each pool's
  GPU resource name), else the classical algorithm.
- **GPU speed** (``gpu_speed``, the comparison's setting): the trace's durations are times on the reference
  GPU; a job runs its duration over its pool's GPU speed (:mod:`infra.simulate.gpu_speed`). Off, every GPU
  runs a job in its trace duration (the twin replay's world).
- **The autoscaler**: pools start at `minSize` (hosts of an existing cluster are all up and never scale); a
  node takes the provisioning delay of its instance family to become Ready, and goes once empty by its pool's
  own settings as compiled: the node group's unneeded time and the stack's cool-down after a scale-up, or the
  NodePool's `consolidateAfter`; capacity blocks are kept and paid for whole (:mod:`infra.simulate.scaling`).
- **ProvisioningRequests**: with `provisioningRequests`, a ClusterQueue's admission check covers the flavors
  compiled in its `admissionChecksStrategy` (`onFlavors`); a job given quota there waits for the autoscaler
  to provision it (:mod:`scheduler.provisioning`).

The approaches this world is compared with (:mod:`scheduler.sim.dynamic.alternatives`) transform the world
alone: what they need of the stack is already in it (pools' prices and provisioning delays, queues, settings).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from infra import catalog
from infra.errors import ConfigError
from infra.scheduling import pool_view, scheduler_inputs
from infra.simulate.gpu_speed import power_w
from infra.simulate.gpu_speed import speed as gpu_speed_of
from infra.simulate.scaling import DELAY_AFTER_ADD_S, UNNEEDED_S, WHOLE_RUN, duration_s, pool_scaling
from infra.simulate.stack import Routing, placement_profile, route, stack_model
from infra.spec import ClusterSpec
from scheduler import compile as compile_policy
from scheduler.resources import gpu_resource
from scheduler.sim.dynamic import Jobs, Pool, Queue, Settings, World
from scheduler.sim.dynamic.routing import own_queue
from scheduler.sim.errors import TraceError
from scheduler.sim.timed_traces import TimedTrace


@dataclass(frozen=True)
class DynamicInput:
    """A stack's world for the dynamic simulation, with what routing left out."""

    world: World
    cpu_only_jobs: int
    stack_policy: str  # the placement policy the stack deploys
    routing: Routing  # what routing the trace's pods to pools changed, and the pools it left without pods

    @property
    def stack_approach(self) -> str:
        """The alternative that is the stack's own policy."""
        return "kueue-fragmentationaware" if self.stack_policy == "FGD" else "kueue-mostallocated"


def _queues(spec: ClusterSpec) -> tuple[Queue, ...]:
    """Every GPU ClusterQueue the stack compiles, as its own queue: its GPU flavors in their order and, for
    each, the nominal quota, borrowing and lending limit of the pool's GPU resource. A team's default queue
    comes first, then its ``<team>-topology`` queue, which only jobs submitted to the team's ``topology``
    LocalQueue reach (Kueue assigns a workload only flavors of its own ClusterQueue, v0.19.2
    pkg/scheduler/flavorassigner/flavorassigner.go:1061-1110)."""
    policy, pools = scheduler_inputs(spec)
    resource = {p.name: gpu_resource(pool_view(spec, p)) for p in spec.node_pools}
    objects = compile_policy(policy, pools)
    by_name: dict[str, Queue] = {}
    weights = {t.name: t.weight for t in policy.teams}
    for obj in objects:
        if obj.get("kind") != "ClusterQueue":
            continue
        name = obj["metadata"]["name"]
        team = next((t for t in weights if name in (t, f"{t}-topology")), None)
        if team is None:
            continue
        flavors: list[str] = []
        nominal: dict[str, int] = {}
        borrow: dict[str, int | None] = {}
        lend: dict[str, int | None] = {}
        for group in obj["spec"].get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                pool = flavor["name"]
                if pool not in resource:
                    continue
                for r in flavor.get("resources", []):
                    if r["name"] == resource[pool]:
                        flavors.append(pool)
                        nominal[pool] = int(r.get("nominalQuota", 0))
                        borrow[pool] = int(r["borrowingLimit"]) if "borrowingLimit" in r else None
                        lend[pool] = int(r["lendingLimit"]) if "lendingLimit" in r else None
        cohort = obj["spec"].get("cohortName", "")
        checks = obj["spec"].get("admissionChecksStrategy", {}).get("admissionChecks", [])
        checked = tuple(p for c in checks for p in c.get("onFlavors", flavors) if p in flavors)
        by_name[name] = Queue(name, tuple(flavors), nominal, borrow, lend, weights[team], cohort, checked)
    order = [n for t in weights for n in (t, f"{t}-topology")]
    return tuple(by_name[n] for n in order if n in by_name)


def team_gpus(queues: tuple[Queue, ...], units: dict[str, int]) -> np.ndarray:
    """Each queue's nominal quota in GPUs: a pool's units over its units per GPU (a MIG slice is 1/7 of a
    GPU, a time-sliced replica 1/replicas), so a team's share of the jobs follows the GPUs it was promised."""
    return np.array(
        [sum(n / units.get(p, 1) for p, n in q.nominal.items()) for q in queues], dtype=np.float64
    )


def _pools(
    spec: ClusterSpec,
    cluster_models: tuple[str, ...],
    provision_s: float | None,
    gpu_speed: bool,
    window: tuple[float, float],
) -> tuple[Pool, ...]:
    model = stack_model(spec)
    out = []
    for pool in spec.node_pools:
        nodes = tuple(i for i, m in enumerate(cluster_models) if m == pool.name)
        gpu = pool.gpu_model or ""
        resource = model.resources[pool.name]
        speed, watts = (gpu_speed_of(gpu) if gpu_speed else 1.0), power_w(gpu)
        itype = catalog.CATALOG.get(pool.instance_type or "")
        if itype is None:  # hosts of an existing cluster: all up, never scaled
            out.append(
                Pool(pool.name, nodes, model.units[pool.name], len(nodes), 0.0, None, speed, watts, resource)
            )
            continue
        delay = provision_s if provision_s is not None else catalog.provision_delay_s(itype.family)
        scaling = pool_scaling(spec, pool, window)
        out.append(
            Pool(
                pool.name,
                nodes,
                model.units[pool.name],
                pool.min_size or 0,
                delay,
                itype.price_per_hour,
                speed,
                watts,
                resource,
                unneeded_s=scaling.unneeded_s,
                karpenter=scaling.karpenter,
                window=scaling.window,
            )
        )
    return tuple(out)


def stack_world(
    spec: ClusterSpec,
    trace: TimedTrace,
    *,
    seed: int = 42,
    time_scale: float = 1.0,
    provision_s: float | None = None,
    gpu_speed: bool = False,
    capacity_window: tuple[float, float] = WHOLE_RUN,
) -> DynamicInput:
    """The stack's world for ``trace``: its nodes, pools, compiled queues, priorities and Kueue settings; with
    ``gpu_speed`` a job runs its trace duration over its GPU's speed (:mod:`infra.simulate.gpu_speed`), else
    its trace duration on every GPU. ``capacity_window`` is when the stack's capacity blocks run (seconds on
    the run's clock; by default the whole run)."""
    model = stack_model(spec)
    routed, routing = route(model, trace.workload, spec)
    keep = np.flatnonzero(trace.workload.num_gpu > 0)
    queues = _queues(spec)
    if not queues:
        raise ConfigError(["gpufleet:teams: the dynamic simulation needs at least one team with a GPU quota"])
    names = [q.name for q in queues]
    policy, _ = scheduler_inputs(spec)
    values = {p.name: p.value for p in policy.priority_classes}
    team_default = {t.name: values.get(t.priority, 0) for t in policy.teams}
    teams = [t.name for t in policy.teams if t.name in names]  # every team with a default GPU queue
    per_queue = dict(zip(names, team_gpus(queues, model.units).tolist(), strict=True))
    share = np.array([per_queue[t] + per_queue.get(f"{t}-topology", 0.0) for t in teams])
    share = share / share.sum() if share.sum() else np.full(len(teams), 1 / len(teams))
    rng = np.random.default_rng(seed)
    drawn = rng.choice(len(teams), size=len(keep), p=share)
    queue = np.empty(len(keep), dtype=np.int64)
    named = np.zeros(len(keep), dtype=bool)  # the trace named the job's LocalQueue
    priority = np.empty(len(keep), dtype=np.int64)
    source = trace.workload.source
    for i, row in enumerate(keep.tolist()):
        line = int(trace.workload.rows[row])
        given = trace.team[row]
        if given and given not in teams:
            raise TraceError(
                f"team {given!r} is not a team of the stack; accepted: {', '.join(teams)}",
                path=source,
                row=line,
            )
        team = given or teams[drawn[i]]
        local = trace.queue[row] if trace.queue else ""
        if local not in ("", "default", "topology"):
            raise TraceError(
                f"queue {local!r} is not a LocalQueue of a team; accepted: default, topology",
                path=source,
                row=line,
            )
        name = f"{team}-topology" if local == "topology" else team
        if name not in names:
            raise TraceError(
                f"team {team!r} has no topology queue (no quota on a topology pool)", path=source, row=line
            )
        queue[i] = names.index(name)
        named[i] = bool(local)
        wanted = trace.priority[row]
        if wanted and wanted not in values:
            raise TraceError(
                f"priority {wanted!r} is not a WorkloadPriorityClass of the stack; accepted: {', '.join(values)}",
                path=source,
                row=line,
            )
        priority[i] = values[wanted] if wanted else team_default.get(team, 0)
    jobs = Jobs(
        arrival=trace.arrival[keep] * time_scale,
        duration=trace.duration[keep] * time_scale,
        pods=trace.pods[keep],
        queue=queue,
        priority=priority,
        workload=routed,
    )
    strategy, params = placement_profile(spec)
    stack_policy = "FGD" if spec.scheduling.placement.strategy == "FragmentationAware" else strategy
    settings = Settings(
        policy=stack_policy,
        policy_params=params if stack_policy != "FGD" else {},
        pods_ready_timeout_s=duration_s(policy.wait_for_pods_ready_timeout),
        fair_sharing=policy.fair_sharing,
        fair_preemption_strategies=policy.fair_preemption_strategies,
        # as the ClusterQueues are compiled (scheduler.kueue): set unless fair sharing decides instead
        borrow_within_cohort_max_priority=None
        if policy.fair_sharing
        else policy.borrow_within_cohort_max_priority,
        scale_down_unneeded_s=UNNEEDED_S,
        # cluster-autoscaler's cool-down runs where it scales a node group (aws, not on Karpenter's pools)
        scale_down_delay_after_add_s=DELAY_AFTER_ADD_S if spec.platform == "aws" else 0.0,
        seed=seed,
    )
    world = World(
        model.cluster,
        _pools(spec, model.cluster.gpu_model, provision_s, gpu_speed, capacity_window),
        queues,
        jobs,
        settings,
    )
    # a job whose LocalQueue the trace does not name goes where its team holds quota for its hardware
    other = {names.index(t): names.index(f"{t}-topology") for t in teams if f"{t}-topology" in names}
    world = replace(world, jobs=replace(jobs, queue=own_queue(world, named, other)))
    return DynamicInput(world, int((trace.workload.num_gpu == 0).sum()), stack_policy, routing)
