"""Input checks the compiler runs itself (it is a public API): every problem names its `gpufleet:` key path.

Index `i` in `teams[i]` / `nodePools[i]` is the position in the policy's tuples, which the infra adapter keeps
in spec order, so the paths point at the user's stack file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from scheduler.errors import SchedulerConfigError
from scheduler.extender.manifests import image_problem
from scheduler.labels import (
    AUTOSCALER_NAMESPACE,
    GPU_OPERATOR_NAMESPACE,
    GPU_TAINT,
    KUEUE_NAMESPACE,
    POOL_LABEL,
    SCHEDULER_NAMESPACE,
)
from scheduler.model import PLACEMENT_STRATEGIES, PoolView, SchedulingPolicy, TeamPolicy
from scheduler.resources import units_per_gpu

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DURATION = re.compile(r"^(\d+)(s|m|h)$")
CPU_FLAVOR = "cpu-only"  # the ResourceFlavor for CPU-only work (the `cpu` queue); no pool may take this name
GPU_CORES_FLAVOR = "gpu-cores"  # the cores and memory that come with GPUs (the GPU queue); nor this one
RESERVED_FLAVORS = (CPU_FLAVOR, GPU_CORES_FLAVOR)
# Each team's ClusterQueues: `<team>` (GPU work), `<team>-cpu` (CPU-only work), `<team>-topology` (where a pool is
# topology-aware). A team may not be named like another team's queue.
CPU_SUFFIX = "-cpu"
TOPOLOGY_SUFFIX = "-topology"
QUEUE_SUFFIXES = {CPU_SUFFIX: "CPU-only", TOPOLOGY_SUFFIX: "topology"}
# Kubernetes reserves the `system:` prefix for its own identities: a group such as `system:authenticated` or
# `system:serviceaccounts` means every user or every ServiceAccount (kubernetes.io "Using RBAC Authorization").
SYSTEM_PREFIX = "system:"
RESERVED_NAMESPACES = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", KUEUE_NAMESPACE, GPU_OPERATOR_NAMESPACE,
     SCHEDULER_NAMESPACE, AUTOSCALER_NAMESPACE}
)  # fmt: skip
MIN_AWS_PODS_READY_SECONDS = (
    15 * 60
)  # a cold GPU node (scale from zero, driver, image pull) takes 10-15 minutes
ROOT = "gpufleet"


def seconds(duration: str) -> int:
    match = DURATION.match(duration)
    if not match:
        raise ValueError(duration)
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def max_admitted_gpus(team: TeamPolicy, pool: PoolView) -> int:
    """The most GPUs of `pool` the team can ever hold: its quota plus what it may borrow, within the pool."""
    quota = team.quotas.get(pool.name, 0)
    borrow = pool.max_gpus if team.borrowing_limit is None else team.borrowing_limit
    return min(max(pool.max_gpus, quota), quota + borrow)


def lendable(team: TeamPolicy, pool: PoolView) -> int:
    quota = team.quotas.get(pool.name, 0)
    return quota if team.lending_limit is None else min(quota, team.lending_limit)


def leftover_gpus(policy: SchedulingPolicy, pool: PoolView) -> int:
    """Pool capacity no team holds as quota: it goes to the cohort, so any team can borrow it."""
    return max(0, pool.max_gpus - sum(t.quotas.get(pool.name, 0) for t in policy.teams))


# What the docs' examples ask per slice (docs/scheduling.md, "Shared GPUs" and "MIG slices"): cores, GiB.
EXAMPLE_SLICE_REQUESTS = {"timeSlicing": (1, 4), "mig": (3, 32)}


def warnings(pools: Sequence[PoolView]) -> list[str]:
    """Not errors: sharing pools whose nodes have fewer cores or GiB per GPU slice than the docs' example job
    asks. A node full of such jobs runs out of CPU or memory before it runs out of slices, so some slices idle
    (and their pods stay pending) however the quotas are set."""
    out: list[str] = []
    for i, pool in enumerate(pools):
        if pool.sharing not in EXAMPLE_SLICE_REQUESTS or not (
            pool.cpus_per_node and pool.memory_gib_per_node
        ):
            continue
        slices = pool.gpus_per_node * units_per_gpu(pool)
        cpu, memory = pool.cpus_per_node / slices, pool.memory_gib_per_node / slices
        want_cpu, want_memory = EXAMPLE_SLICE_REQUESTS[pool.sharing]
        short = [
            f"{have} {unit}, fewer than the {want} the documented example job asks"
            for have, want, unit, low in (
                (f"{cpu:.1f}", want_cpu, "cores", cpu < want_cpu),
                (f"{memory:.0f}", want_memory, "GiB", memory < want_memory),
            )
            if low
        ]
        if short:
            resource = " and ".join(
                name for name, low in (("CPU", cpu < want_cpu), ("memory", memory < want_memory)) if low
            )
            out.append(
                f"{ROOT}:nodePools[{i}] ({pool.name}): each of a node's {slices} GPU slices comes with "
                f"{'; '.join(short)}; a node full of such jobs runs out of {resource} before it runs out of "
                "slices"
            )
    return out


def check(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> None:
    """Raise SchedulerConfigError listing every problem; return quietly when the inputs compile."""
    problems = _pool_problems(pools) + _team_problems(policy, pools) + _scheduling_problems(policy)
    if policy.provisioning_requests and not any(p.node_group for p in pools):
        problems.append(
            f"{ROOT}:scheduling.provisioningRequests: no pool is autoscaled (existing clusters have fixed hosts), "
            "so a ProvisioningRequest could never be satisfied; set it to false"
        )
    problems += _provisioning_pool_problems(policy, pools)
    problems += _capacity_problems(policy, pools)
    if problems:
        raise SchedulerConfigError(problems)


def _provisioning_pool_problems(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[str]:
    """A listed pool must be one whose nodes the cluster-autoscaler adds: a static pool (fixed hosts, DRA shares)
    has nothing to provision, so its jobs would wait on the check for ever."""
    autoscaled = [p.name for p in pools if p.provisionable]
    return [
        f"{ROOT}:scheduling.provisioningRequests[{i}]: {name!r} is not an autoscaled GPU pool; accepted: "
        f"{', '.join(autoscaled) or 'none (set it to false)'}"
        for i, name in enumerate(policy.provisioning_pools)
        if name not in autoscaled
    ]


def _pool_problems(pools: Sequence[PoolView]) -> list[str]:
    out: list[str] = []
    seen: dict[str, int] = {}
    for i, pool in enumerate(pools):
        key = f"{ROOT}:nodePools[{i}]"
        if not DNS_LABEL.match(pool.name) or pool.name in RESERVED_FLAVORS:
            out.append(
                f"{key}.name: {pool.name!r} must be a DNS label (a-z, 0-9, -) other than {' or '.join(map(repr, RESERVED_FLAVORS))}"
            )
        if pool.name in seen:
            out.append(f"{key}.name: {pool.name!r} duplicates nodePools[{seen[pool.name]}]")
        seen.setdefault(pool.name, i)
        if pool.gpus_per_node < 1:
            out.append(f"{key}.gpusPerNode: must be at least 1 (got {pool.gpus_per_node})")
        if pool.max_nodes < 0:
            out.append(f"{key}.maxSize: must be >= 0 (got {pool.max_nodes})")
        if pool.labels.get(POOL_LABEL) != pool.name:
            out.append(f"{key}.labels: must carry {POOL_LABEL}={pool.name}")
        if GPU_TAINT not in pool.taints:
            out.append(
                f"{key}.taints: must include {GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"
            )
        if len(pool.taints) > 8:
            out.append(f"{key}.taints: at most 8 taints (a Kueue flavor carries at most 8 tolerations)")
        if pool.sharing == "timeSlicing" and not (pool.time_slicing_replicas or 0) >= 2:
            out.append(
                f"{key}.sharing.timeSlicing.replicas: must be at least 2 (got {pool.time_slicing_replicas})"
            )
        if pool.sharing == "mig" and not (pool.mig_profile and (pool.mig_instances_per_gpu or 0) >= 1):
            out.append(
                f"{key}.sharing.mig: a MIG pool needs its profile and the profile's instances per GPU "
                f"(got {pool.mig_profile!r}, {pool.mig_instances_per_gpu!r})"
            )
        if pool.sharing == "draShares" and not (pool.dra_shares or 0) >= 2:
            out.append(f"{key}.sharing.draShares.shares: at least 2 shares per GPU (got {pool.dra_shares!r})")
    return out


def _team_problems(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[str]:
    out: list[str] = []
    pool_names = [p.name for p in pools]
    priorities = [p.name for p in policy.priority_classes]
    names: dict[str, int] = {}
    namespaces: dict[str, int] = {}
    for i, team in enumerate(policy.teams):
        key = f"{ROOT}:teams[{i}]"
        if not DNS_LABEL.match(team.name):
            out.append(f"{key}.name: {team.name!r} must be a DNS label (a-z, 0-9, -)")
        if team.name in names:
            out.append(f"{key}.name: {team.name!r} duplicates teams[{names[team.name]}]")
        names.setdefault(team.name, i)
        if not DNS_LABEL.match(team.namespace) or team.namespace in RESERVED_NAMESPACES:
            out.append(f"{key}.namespace: {team.namespace!r} must be a DNS label and not a system namespace")
        if team.namespace in namespaces:
            out.append(
                f"{key}.namespace: {team.namespace!r} is already used by teams[{namespaces[team.namespace]}]"
            )
        namespaces.setdefault(team.namespace, i)
        out += _generated_name_problems(policy, i, team) + _group_problems(i, team)
        for pool, gpus in team.quotas.items():
            if pool not in pool_names:
                out.append(f"{key}.quotas.{pool}: unknown pool; accepted: {', '.join(pool_names)}")
            if gpus < 0:
                out.append(f"{key}.quotas.{pool}: must be >= 0 GPUs (got {gpus})")
        for field, value in (("borrowingLimit", team.borrowing_limit), ("lendingLimit", team.lending_limit)):
            if value is not None and value < 0:
                out.append(f"{key}.{field}: must be >= 0 GPUs (got {value})")
        if team.priority not in priorities:
            out.append(
                f"{key}.priority: unknown priority class {team.priority!r}; accepted: {', '.join(priorities)}"
            )
        if not team.weight > 0:
            out.append(f"{key}.weight: must be > 0 (got {team.weight})")
        if team.cpu_quota < 0 or team.memory_quota_gib < 0:
            out.append(f"{key}: CPU and memory quotas must be >= 0")
    return out


def _generated_name_problems(policy: SchedulingPolicy, i: int, team: TeamPolicy) -> list[str]:
    """A team named like another team's CPU or topology ClusterQueue (`vision-cpu` beside `vision`) would make
    two teams share one queue and two objects one rendered file."""
    return [
        f"{ROOT}:teams[{i}].name: {team.name!r} is the name of teams[{j}]'s {what} ClusterQueue "
        f"({other.name}{suffix}); choose a name that does not end in {suffix!r} after another team's name"
        for j, other in enumerate(policy.teams)
        if j != i
        for suffix, what in QUEUE_SUFFIXES.items()
        if team.name == other.name + suffix
    ]


def _group_problems(i: int, team: TeamPolicy) -> list[str]:
    return [
        f"{ROOT}:teams[{i}].groups[{k}]: {group!r} is a Kubernetes system group (every user, or every "
        f"ServiceAccount, may be in it): name the team's own identity-provider group"
        for k, group in enumerate(team.groups)
        if group.startswith(SYSTEM_PREFIX)
    ]


def _scheduling_problems(policy: SchedulingPolicy) -> list[str]:
    key = f"{ROOT}:scheduling"
    out: list[str] = []
    if not DNS_LABEL.match(policy.cohort):
        out.append(f"{key}.cohort: {policy.cohort!r} must be a DNS label")
    seen: set[str] = set()
    for i, pc in enumerate(policy.priority_classes):
        if not DNS_LABEL.match(pc.name) or pc.name in seen:
            out.append(f"{key}.priorityClasses[{i}].name: {pc.name!r} must be a unique DNS label")
        seen.add(pc.name)
    if policy.placement_strategy not in PLACEMENT_STRATEGIES:
        out.append(
            f"{key}.placement.strategy: {policy.placement_strategy!r}; accepted: {', '.join(PLACEMENT_STRATEGIES)}"
        )
    if policy.placement_strategy == "FragmentationAware":
        problem = image_problem(policy.extender_image)
        if problem:
            out.append(f"{ROOT}:versions.extenderImage: {problem}")
    for resource, weight in policy.placement_weights.items():
        if not 1 <= weight <= 100:
            out.append(f"{key}.placement.weights.{resource}: must be 1..100 (got {weight})")
    try:
        timeout = seconds(policy.wait_for_pods_ready_timeout)
    except ValueError:
        out.append(
            f"{key}.waitForPodsReadyTimeout: {policy.wait_for_pods_ready_timeout!r}; accepted: e.g. 30m, 1h"
        )
    else:
        if policy.platform == "aws" and timeout < MIN_AWS_PODS_READY_SECONDS:
            out.append(
                f"{key}.waitForPodsReadyTimeout: {policy.wait_for_pods_ready_timeout} is shorter than GPU node "
                "provisioning (up to 15m from zero); gangs would be requeued before their nodes arrive; use >= 15m"
            )
    out += _team_pod_problems(policy)
    if not re.match(r"^1\.\d+$", policy.kubernetes_version):
        out.append(f"{ROOT}:cluster.kubernetesVersion: {policy.kubernetes_version!r}; expected e.g. 1.35")
    elif not policy.kube_scheduler_image_tag.startswith(f"v{policy.kubernetes_version}."):
        out.append(
            f"{ROOT}:versions.kubeSchedulerImage: {policy.kube_scheduler_image_tag!r} must match the cluster's "
            f"Kubernetes minor (v{policy.kubernetes_version}.x)"
        )
    return out


def _team_pod_problems(policy: SchedulingPolicy) -> list[str]:
    """What the team admission rules take from the stack: the PriorityClasses team pods may name, and the
    longest termination grace of a GPU pod."""
    key = f"{ROOT}:scheduling"
    out = [
        f"{key}.podPriorityClasses[{i}]: {name!r} is a Kubernetes system PriorityClass (system- names are "
        "reserved for the cluster's own critical pods); team pods may not use it"
        for i, name in enumerate(policy.pod_priority_classes)
        if name.startswith("system-")
    ]
    try:
        seconds(policy.max_termination_grace_period)
    except ValueError:
        out.append(
            f"{key}.maxTerminationGracePeriod: {policy.max_termination_grace_period!r}; accepted: e.g. 30s, 5m"
        )
    return out


def _capacity_problems(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[str]:
    out: list[str] = []
    for i, pool in enumerate(pools):
        holders = [(j, t) for j, t in enumerate(policy.teams) if t.quotas.get(pool.name, 0) > 0]
        total = sum(t.quotas[pool.name] for _, t in holders)
        if total > pool.max_gpus and not pool.oversubscribe and holders:
            last = holders[-1][0]
            out.append(
                f"{ROOT}:teams[{last}].quotas.{pool.name}: quotas on pool {pool.name!r} add up to {total} GPUs "
                f"but it can never have more than {pool.max_gpus} ({pool.max_nodes} nodes x {pool.gpus_per_node}); "
                f"lower the quotas, raise nodePools[{i}].maxSize, or set nodePools[{i}].oversubscribe: true"
            )
    for j, team in enumerate(policy.teams):
        if not team.borrowing_limit:
            continue
        best = max(
            (
                sum(lendable(o, p) for o in policy.teams if o is not team) + leftover_gpus(policy, p)
                for p in pools
            ),
            default=0,
        )
        if team.borrowing_limit > best:
            out.append(
                f"{ROOT}:teams[{j}].borrowingLimit: {team.borrowing_limit} GPUs, but the cohort can lend this team "
                f"at most {best} GPUs of any pool (other teams' lendable quota plus unassigned capacity)"
            )
    return out
