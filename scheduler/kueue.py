"""Kueue objects (API kueue.x-k8s.io/v1beta2, Kueue 0.19): flavors, cohort, the ClusterQueues and LocalQueues of
each team.

CPU-only work and GPU work are queued apart, because a resource can be in only one resource group of a queue
and Kueue's admission is quota-only (it knows nothing of nodes):
- GPU work: the team's ClusterQueue `<team>` (LocalQueue `default`) has two resource groups, and Kueue picks one
  flavor per group (pkg/scheduler/flavorassigner): `cpu` and `memory` with the single `gpu-cores` flavor (no
  node selector, no toleration), whose quota is only the cores and memory that come with the team's GPUs; and
  every GPU resource name (and `vpc.amazonaws.com/efa` when a pool has EFA) with one flavor per pool, which
  selects and tolerates that pool's nodes. A GPU pod gets `gpu-cores` for its cores and its pool's flavor for
  its GPUs, so its node selector is exactly its pool's.
- CPU-only work: `<team>-cpu` (LocalQueue `cpu`) with one group, `cpu` and `memory`, and the `cpu-only` flavor,
  which selects the stack's CPU nodes (`scheduling.cpuNodeLabels`; any untainted node when unset) and has the
  team's CPU-only allowance. The cores of GPU nodes are never in it: a CPU pod cannot run there (the GPU taint),
  so counting them would admit CPU work that cannot be scheduled and leave the team's GPU jobs without cores.
  The admission policies send a job to the queue its requests belong in (scheduler.queue_routing).

Topology-aware pools (EFA pools on EKS, pools whose spec names topology labels) get a Kueue `Topology` and a
flavor with `topologyName`, and they are served by a third queue per team, `<team>-topology` (LocalQueue
`topology`), whose flavors are all topology-aware. A separate queue because Kueue's topology-aware scheduling
(pkg/scheduler/flavorassigner/tas_flavorassigner.go, v0.19.2) only places a pod set whose every flavor is
topology-aware, and gives a topology flavor only to pod sets that request a topology or are in a queue where
every flavor has one: the split CPU group above (`gpu-cores`, no topology) would make every gang fail there. In
the topology queue one resource group covers cpu, memory, GPUs and EFA, so every pod of a gang, a CPU-only
launcher included, is placed inside the pool's topology.

The team's queues sit under a Cohort of their own (`<cohort>-<team>`, parent the stack's cohort), which carries the team's
fair-sharing weight: Kueue computes a share per ClusterQueue and per Cohort node, so a weight on each of the
team's three queues would count a team borrowing through several of them as several lightly-borrowing teams
(site/content/en/docs/concepts/fair_sharing.md, v0.19.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.checks import (
    CPU_FLAVOR,
    CPU_SUFFIX,
    GPU_CORES_FLAVOR,
    TOPOLOGY_SUFFIX,
    leftover_gpus,
    lendable,
)
from scheduler.labels import EFA_RESOURCE, POOL_LABEL, SHARE_RESOURCE
from scheduler.labels import metadata as _meta
from scheduler.model import PoolView, SchedulingPolicy, TeamPolicy
from scheduler.resources import (
    covered_gpu_resources,
    cpu_for_gpus,
    gpu_resource,
    gpu_units,
    memory_gib_for_gpus,
)

API = "kueue.x-k8s.io/v1beta2"
LOCAL_QUEUE = (
    "default"  # Kueue gives jobs without a queue-name label the namespace's LocalQueue named "default"
)
CPU_QUEUE = "cpu"  # the LocalQueue of each team for CPU-only work
PROVISIONING_CHECK = "gpufleet-provisioning"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
# Scales the node groups up for the whole job at once, or not at all (check-capacity only checks).
PROVISIONING_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


def quantity(value: float) -> int | str:
    return int(value) if float(value).is_integer() else str(value)


QUANTITY_FIELDS = ("nominalQuota", "borrowingLimit", "lendingLimit")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIX = {v: k for k, v in _BINARY.items()}


def canonical_quantity(value: int | float | str) -> str:
    """A quantity as the API server writes it back (k8s.io/apimachinery pkg/api/resource, Quantity.String ->
    CanonicalizeBytes): zero is "0"; a binary-suffixed value keeps the largest binary suffix that leaves an
    integer (6144Gi -> 6Ti, 5248Gi stays) unless it is below 1024 or not whole, when it is written decimally;
    a decimal value takes the largest exponent that is a multiple of 3 and leaves an integer (1000 -> 1k,
    544 stays, 0.5 -> 500m)."""
    from decimal import Decimal

    text = str(value).strip()
    suffix = next((s for s in _BINARY if text.endswith(s)), None)
    if suffix is None:
        suffix = next((s for s in sorted(_DECIMAL, key=len, reverse=True) if s and text.endswith(s)), "")
    number = Decimal(text[: len(text) - len(suffix)] if suffix else text)
    amount = number * (
        Decimal(1024) ** _BINARY[suffix] if suffix in _BINARY else Decimal(10) ** _DECIMAL[suffix]
    )
    if amount == 0:
        return "0"
    if suffix in _BINARY and abs(amount) >= 1024 and amount == amount.to_integral_value():
        whole, exp = int(amount), 0
        while whole % 1024 == 0 and exp < 6:
            whole //= 1024
            exp += 1
        return f"{whole}{_BINARY_SUFFIX[exp]}"
    exp = next(e for e in range(-9, 21, 3) if (amount * Decimal(10) ** -e) % 1 == 0)  # nano at the finest
    mantissa = int(amount * Decimal(10) ** -exp)
    while mantissa % 1000 == 0 and exp < 18:
        mantissa //= 1000
        exp += 3
    return f"{mantissa}{_DECIMAL_SUFFIX[exp]}"


def as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """A ClusterQueue or Cohort with its quotas and fair-sharing weight as the API server stores them.

    They are `resource.Quantity` fields. Kueue's ClusterQueue webhook decodes the object into its Go types and
    writes it back, and a Quantity always serializes as a string in canonical form (k8s.io/apimachinery
    pkg/api/resource Quantity.MarshalJSON), so `16` is read back as `"16"` and `"6144Gi"` as `"6Ti"`. Applied as numbers,
    every later `pulumi up` would see the live string differ from the number it sent and update the object
    again; written as the stored form, a second deploy changes nothing (tests/twin/test_lifecycle.py).
    Other kinds are returned unchanged; the compiler's own objects keep numbers (its checks do arithmetic)."""
    if obj.get("kind") not in ("ClusterQueue", "Cohort"):
        return obj
    import copy

    out = copy.deepcopy(obj)
    spec = out.get("spec", {})
    for group in spec.get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            for resource in flavor.get("resources", []):
                for key in QUANTITY_FIELDS:
                    if key in resource:
                        resource[key] = canonical_quantity(resource[key])
    sharing = spec.get("fairSharing") or {}
    if "weight" in sharing:
        sharing["weight"] = canonical_quantity(sharing["weight"])
    return out


TOPOLOGY_QUEUE = "topology"  # the LocalQueue of each team for topology-aware gangs


def topologies(pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """One Topology per topology-aware pool (named after it), levels broadest first."""
    return [
        {"apiVersion": API, "kind": "Topology", "metadata": _meta(pool.name),
         "spec": {"levels": [{"nodeLabel": label} for label in pool.topology_levels]}}
        for pool in pools
        if pool.topology_levels
    ]  # fmt: skip


def resource_flavors(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """`cpu-only` (the CPU nodes), `gpu-cores` (no node selector: a GPU pod's pool flavor places it) and one
    flavor per pool that selects and tolerates its nodes."""
    cpu_spec = {"nodeLabels": dict(policy.cpu_node_labels)} if policy.cpu_node_labels else {}
    out = [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(CPU_FLAVOR), "spec": cpu_spec},
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(GPU_CORES_FLAVOR), "spec": {}},
    ]
    for pool in pools:
        tolerations = [
            {"key": t["key"], "operator": "Equal", "value": t.get("value", ""), "effect": t["effect"]}
            for t in pool.taints
        ]
        spec: dict[str, Any] = {"nodeLabels": {POOL_LABEL: pool.name}, "tolerations": tolerations}
        if pool.topology_levels:
            spec["topologyName"] = pool.name
        out.append({"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(pool.name), "spec": spec})
    return out


CPU_RESOURCES = ["cpu", "memory"]


def gpu_covered(pools: Sequence[PoolView]) -> list[str]:
    """The GPU group's resources: every GPU resource name, and EFA interfaces when a pool offers them."""
    return covered_gpu_resources(pools) + ([EFA_RESOURCE] if any(p.efa_per_node for p in pools) else [])


def _efa_units(pool: PoolView, gpus: int) -> int:
    """EFA interfaces that go with `gpus` GPUs of the pool (its share of the nodes' interfaces), rounded up."""
    return -(-gpus * pool.efa_per_node // pool.gpus_per_node) if pool.efa_per_node else 0


def _gpu_resources(pool: PoolView, covered: list[str], gpus: int) -> list[dict[str, Any]]:
    own = gpu_resource(pool)
    values = {name: gpu_units(pool, gpus) if name == own else 0 for name in covered}
    if EFA_RESOURCE in values:
        values[EFA_RESOURCE] = _efa_units(pool, gpus)
    return [{"name": name, "nominalQuota": values[name]} for name in covered]


def _cpu_resources(cpu: int, memory_gib: int) -> list[dict[str, Any]]:
    return [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": f"{memory_gib}Gi"}]


def _gpu_share(pools: Sequence[PoolView], gpus: dict[str, int]) -> tuple[int, int]:
    """Cores and GiB that go with these GPUs of each pool (the GPUs' share of their nodes)."""
    by_name = {p.name: p for p in pools}
    cpu = sum(cpu_for_gpus(by_name[n], g) for n, g in gpus.items() if n in by_name)
    memory = sum(memory_gib_for_gpus(by_name[n], g) for n, g in gpus.items() if n in by_name)
    return cpu, memory


def resource_groups(
    cpu_flavor: list[dict[str, Any]], gpu_flavors: list[dict[str, Any]], covered: list[str]
) -> list[dict[str, Any]]:
    """The CPU group, then the GPU group (left out when there is no GPU flavor to list)."""
    groups: list[dict[str, Any]] = [{"coveredResources": list(CPU_RESOURCES), "flavors": cpu_flavor}]
    if gpu_flavors:
        groups.append({"coveredResources": covered, "flavors": gpu_flavors})
    return groups


def _whole_pool_flavor(pool: PoolView, covered: list[str], gpus: int) -> dict[str, Any]:
    """A topology pool's flavor: its GPUs (and EFA) and the cores and memory that go with them."""
    cpu = _cpu_resources(cpu_for_gpus(pool, gpus), memory_gib_for_gpus(pool, gpus))
    return {"name": pool.name, "resources": cpu + _gpu_resources(pool, covered, gpus)}


def cohort(policy: SchedulingPolicy, pools: Sequence[PoolView], covered: list[str]) -> dict[str, Any]:
    """The cohort holds the capacity no team has as quota (GPUs and their cores), so it is borrowable.

    One resource group covering everything: `gpu-cores` holds the cores of spare GPUs of ordinary pools, a
    topology pool's flavor its own. Quota is pooled per flavor and resource, whatever the queues' groups.
    Nothing of `cpu-only` is here: CPU-only work borrows only what other teams' CPU queues lend."""
    spare = {pool.name: leftover_gpus(policy, pool) for pool in pools}
    ordinary = {p.name: spare[p.name] for p in pools if not p.topology_levels}
    flavors = []
    for pool in pools:
        if not spare[pool.name]:
            continue
        if pool.topology_levels:
            flavors.append(_whole_pool_flavor(pool, covered, spare[pool.name]))
        else:
            cpu = _cpu_resources(0, 0)
            flavors.append(
                {"name": pool.name, "resources": cpu + _gpu_resources(pool, covered, spare[pool.name])}
            )
    spec: dict[str, Any] = {}
    if flavors:
        zero = [{"name": name, "nominalQuota": 0} for name in covered]
        cores = {"name": GPU_CORES_FLAVOR, "resources": _cpu_resources(*_gpu_share(pools, ordinary)) + zero}
        spec["resourceGroups"] = [{"coveredResources": CPU_RESOURCES + covered, "flavors": [cores, *flavors]}]
    return {"apiVersion": API, "kind": "Cohort", "metadata": _meta(policy.cohort), "spec": spec}


def _team_flavor(team: TeamPolicy, pool: PoolView, covered: list[str]) -> dict[str, Any]:
    gpus = team.quotas.get(pool.name, 0)
    resources = (
        _whole_pool_flavor(pool, covered, gpus)["resources"]
        if pool.topology_levels
        else _gpu_resources(pool, covered, gpus)
    )
    own = next(r for r in resources if r["name"] == gpu_resource(pool))
    if team.borrowing_limit is not None:
        own["borrowingLimit"] = gpu_units(pool, team.borrowing_limit)
    if team.lending_limit is not None:
        own["lendingLimit"] = gpu_units(pool, lendable(team, pool))
    return {"name": pool.name, "resources": resources}


def team_gpu_cores(team: TeamPolicy, pools: Sequence[PoolView]) -> tuple[int, int]:
    """The `gpu-cores` quota: the cores and memory that go with the team's GPU quota on ordinary pools (a
    topology pool's flavor carries its own)."""
    return _gpu_share([p for p in pools if not p.topology_levels], team.quotas)


def _queue_spec(
    policy: SchedulingPolicy, team: TeamPolicy, pools: Sequence[PoolView], groups: list[dict[str, Any]]
) -> dict[str, Any]:
    preemption: dict[str, Any] = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    if not policy.fair_sharing:  # Kueue ignores borrowWithinCohort under fair sharing (shares decide instead)
        preemption["borrowWithinCohort"] = {
            "policy": "LowerPriority",
            "maxPriorityThreshold": policy.borrow_within_cohort_max_priority,
        }
    spec: dict[str, Any] = {
        "cohortName": team_cohort(policy, team),
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"},
        "preemption": preemption,
        "resourceGroups": groups,
    }
    autoscaled = [
        p.name
        for p in pools
        if p.provisionable and (not policy.provisioning_pools or p.name in policy.provisioning_pools)
    ]
    if policy.provisioning_requests and autoscaled:
        spec["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": PROVISIONING_CHECK, "onFlavors": autoscaled}]
        }
    return spec


def _ordered(team: TeamPolicy, pools: Sequence[PoolView]) -> list[PoolView]:
    # The team's own pools first: with TryNextFlavor Kueue still prefers a flavor that needs no borrowing.
    return sorted(pools, key=lambda p: team.quotas.get(p.name, 0) == 0)


def cluster_queues(
    policy: SchedulingPolicy, team: TeamPolicy, pools: Sequence[PoolView], covered: list[str]
) -> list[dict[str, Any]]:
    """The team's queue for ordinary pools, its CPU queue, and its topology queue when a pool is topology-aware."""
    ordinary = [p for p in _ordered(team, pools) if not p.topology_levels]
    cores = [{"name": GPU_CORES_FLAVOR, "resources": _cpu_resources(*team_gpu_cores(team, pools))}]
    gpu = [_team_flavor(team, pool, covered) for pool in ordinary]
    groups = resource_groups(cores, gpu, covered)
    out = [{"apiVersion": API, "kind": "ClusterQueue", "metadata": _meta(team.name),
            "spec": _queue_spec(policy, team, ordinary, groups)}]  # fmt: skip
    cpu = [{"name": CPU_FLAVOR, "resources": _cpu_resources(team.cpu_quota, team.memory_quota_gib)}]
    cpu_groups = [{"coveredResources": list(CPU_RESOURCES), "flavors": cpu}]
    out.append({"apiVersion": API, "kind": "ClusterQueue", "metadata": _meta(team.name + CPU_SUFFIX),
                "spec": _queue_spec(policy, team, [], cpu_groups)})  # fmt: skip
    aware = [p for p in _ordered(team, pools) if p.topology_levels]
    if aware:
        flavors = [_team_flavor(team, pool, covered) for pool in aware]
        groups = [{"coveredResources": CPU_RESOURCES + covered, "flavors": flavors}]
        out.append({"apiVersion": API, "kind": "ClusterQueue", "metadata": _meta(team.name + TOPOLOGY_SUFFIX),
                    "spec": _queue_spec(policy, team, aware, groups)})  # fmt: skip
    return out


def local_queues(team: TeamPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    out = [(LOCAL_QUEUE, team.name), (CPU_QUEUE, team.name + CPU_SUFFIX)]
    if any(p.topology_levels for p in pools):
        out.append((TOPOLOGY_QUEUE, team.name + TOPOLOGY_SUFFIX))
    return [
        {"apiVersion": API, "kind": "LocalQueue", "metadata": _meta(name, team.namespace),
         "spec": {"clusterQueue": cq}}
        for name, cq in out
    ]  # fmt: skip


def team_cohort(policy: SchedulingPolicy, team: TeamPolicy) -> str:
    """The Cohort of the team's queues, `<cohort>-<team>` (apart from the queues' own names)."""
    return f"{policy.cohort}-{team.name}"


def team_cohorts(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    """One Cohort per team under the stack's cohort, with the team's fair-sharing weight."""
    out = []
    for team in policy.teams:
        spec: dict[str, Any] = {"parentName": policy.cohort}
        if policy.fair_sharing:
            spec["fairSharing"] = {"weight": quantity(team.weight)}
        out.append(
            {"apiVersion": API, "kind": "Cohort", "metadata": _meta(team_cohort(policy, team)), "spec": spec}
        )
    return out


def priority_classes(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    return [
        {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": _meta(pc.name), "value": pc.value,
         "description": pc.description}
        for pc in policy.priority_classes
    ]  # fmt: skip


def provisioning(covered: list[str]) -> list[dict[str, Any]]:
    """Admit GPU jobs only once the cluster-autoscaler has provisioned all of their nodes."""
    config = {
        "apiVersion": API,
        "kind": "ProvisioningRequestConfig",
        "metadata": _meta(PROVISIONING_CHECK),
        "spec": {"provisioningClassName": PROVISIONING_CLASS, "managedResources": covered},
    }
    check = {
        "apiVersion": API,
        "kind": "AdmissionCheck",
        "metadata": _meta(PROVISIONING_CHECK),
        "spec": {
            "controllerName": PROVISIONING_CONTROLLER,
            "parameters": {
                "apiGroup": "kueue.x-k8s.io",
                "kind": "ProvisioningRequestConfig",
                "name": PROVISIONING_CHECK,
            },
        },
    }
    return [config, check]


def kueue_objects(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    covered = gpu_covered(pools)
    out = priority_classes(policy) + topologies(pools) + resource_flavors(policy, pools)
    if policy.provisioning_requests:
        out += provisioning([name for name in covered if name != SHARE_RESOURCE])
    out.append(cohort(policy, pools, covered))
    out += team_cohorts(policy)
    for team in policy.teams:
        out += cluster_queues(policy, team, pools, covered)
        out += local_queues(team, pools)
    return out
