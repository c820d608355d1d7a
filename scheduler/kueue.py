"""Kueue objects (API kueue.x-k8s.io/v1beta2, Kueue 0.19): flavors, cohort, one ClusterQueue and LocalQueue per team.

Every queue has two resource groups, and Kueue picks one flavor per group (pkg/scheduler/flavorassigner):
- `cpu` and `memory` with the single `cpu-only` flavor, which adds no node selector and no toleration. Its
  quota is the team's CPU-only quota plus the CPU/memory share of the team's GPUs, so a GPU pod's cores are
  counted here too;
- every GPU resource name (and `vpc.amazonaws.com/efa` when a pool has EFA) with one flavor per pool, which
  selects and tolerates that pool's nodes. A pool's flavor has quota only in its own GPU resource (and EFA).
A pod that requests no GPU resource only touches the first group, so it can only ever get `cpu-only`: it never
spills onto a GPU pool when its CPU quota runs out (it waits or borrows CPU instead). A GPU pod gets `cpu-only`
for its cores and its pool's flavor for its GPUs; `cpu-only` adds no node labels, so the pod's node selector is
exactly its pool's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.checks import CPU_FLAVOR, leftover_gpus, lendable
from scheduler.labels import EFA_RESOURCE, POOL_LABEL
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
PROVISIONING_CHECK = "gpufleet-provisioning"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
# Scales the node groups up for the whole job at once, or not at all (check-capacity only checks).
PROVISIONING_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


def quantity(value: float) -> int | str:
    return int(value) if float(value).is_integer() else str(value)


def resource_flavors(pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """A CPU-only flavor (any untainted node) and one flavor per pool that selects and tolerates its nodes."""
    out = [{"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(CPU_FLAVOR), "spec": {}}]
    for pool in pools:
        tolerations = [
            {"key": t["key"], "operator": "Equal", "value": t.get("value", ""), "effect": t["effect"]}
            for t in pool.taints
        ]
        spec = {"nodeLabels": {POOL_LABEL: pool.name}, "tolerations": tolerations}
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


def cohort(policy: SchedulingPolicy, pools: Sequence[PoolView], covered: list[str]) -> dict[str, Any]:
    """The cohort holds the capacity no team has as quota (GPUs and their cores), so it is borrowable."""
    spare = {pool.name: leftover_gpus(policy, pool) for pool in pools}
    gpu_flavors = [
        {"name": pool.name, "resources": _gpu_resources(pool, covered, spare[pool.name])}
        for pool in pools
        if spare[pool.name]
    ]
    spec: dict[str, Any] = {}
    if gpu_flavors:
        cpu = [{"name": CPU_FLAVOR, "resources": _cpu_resources(*_gpu_share(pools, spare))}]
        spec["resourceGroups"] = resource_groups(cpu, gpu_flavors, covered)
    return {"apiVersion": API, "kind": "Cohort", "metadata": _meta(policy.cohort), "spec": spec}


def _team_flavor(team: TeamPolicy, pool: PoolView, covered: list[str]) -> dict[str, Any]:
    gpus = team.quotas.get(pool.name, 0)
    resources = _gpu_resources(pool, covered, gpus)
    own = next(r for r in resources if r["name"] == gpu_resource(pool))
    if team.borrowing_limit is not None:
        own["borrowingLimit"] = gpu_units(pool, team.borrowing_limit)
    if team.lending_limit is not None:
        own["lendingLimit"] = gpu_units(pool, lendable(team, pool))
    return {"name": pool.name, "resources": resources}


def team_cpu_quota(team: TeamPolicy, pools: Sequence[PoolView]) -> tuple[int, int]:
    """The `cpu-only` quota: CPU-only work plus the cores and memory that go with the team's GPU quota."""
    cpu, memory = _gpu_share(pools, team.quotas)
    return team.cpu_quota + cpu, team.memory_quota_gib + memory


def cluster_queue(
    policy: SchedulingPolicy, team: TeamPolicy, pools: Sequence[PoolView], covered: list[str]
) -> dict[str, Any]:
    # The team's own pools first: with TryNextFlavor Kueue still prefers a flavor that needs no borrowing.
    ordered = sorted(pools, key=lambda p: team.quotas.get(p.name, 0) == 0)
    cpu = [{"name": CPU_FLAVOR, "resources": _cpu_resources(*team_cpu_quota(team, pools))}]
    gpu = [_team_flavor(team, pool, covered) for pool in ordered]
    preemption: dict[str, Any] = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    if not policy.fair_sharing:  # Kueue ignores borrowWithinCohort under fair sharing (shares decide instead)
        preemption["borrowWithinCohort"] = {
            "policy": "LowerPriority",
            "maxPriorityThreshold": policy.borrow_within_cohort_max_priority,
        }
    spec: dict[str, Any] = {
        "cohortName": policy.cohort,
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"},
        "preemption": preemption,
        "resourceGroups": resource_groups(cpu, gpu, covered),
    }
    if policy.fair_sharing:
        spec["fairSharing"] = {"weight": quantity(team.weight)}
    if policy.provisioning_requests:
        spec["admissionChecksStrategy"] = {
            "admissionChecks": [
                {"name": PROVISIONING_CHECK, "onFlavors": [p.name for p in pools if p.node_group]}
            ]
        }
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": _meta(team.name), "spec": spec}


def local_queue(team: TeamPolicy) -> dict[str, Any]:
    meta = _meta(LOCAL_QUEUE, team.namespace)
    return {"apiVersion": API, "kind": "LocalQueue", "metadata": meta, "spec": {"clusterQueue": team.name}}


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
    out = priority_classes(policy) + resource_flavors(pools)
    if policy.provisioning_requests:
        out += provisioning(covered)
    out.append(cohort(policy, pools, covered))
    out += [cluster_queue(policy, team, pools, covered) for team in policy.teams]
    out += [local_queue(team) for team in policy.teams]
    return out
