"""Kueue objects (API kueue.x-k8s.io/v1beta2, Kueue 0.19): flavors, cohort, one ClusterQueue and LocalQueue per team.

Every queue has a single resource group covering cpu, memory and every GPU resource name, with the CPU-only
flavor first and then one flavor per pool. One group (not one per GPU kind) matters: Kueue picks a flavor per
resource group, so a pod whose GPUs and CPUs came from different groups would get two pools' node selectors
and never schedule. A pool's flavor has quota only in its own GPU resource, so a pod asking for
`nvidia.com/gpu.shared` can only land on time-sliced pools, and a whole-GPU pod never on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.checks import CPU_FLAVOR, leftover_gpus, lendable
from scheduler.labels import POOL_LABEL
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


def _flavor_resources(
    pool: PoolView | None, covered: list[str], gpus: int, cpu: int, memory_gib: int
) -> list[dict[str, Any]]:
    own = gpu_resource(pool) if pool else None
    values: dict[str, int | str] = {"cpu": cpu, "memory": f"{memory_gib}Gi"}
    for name in covered[2:]:
        values[name] = gpu_units(pool, gpus) if pool is not None and name == own else 0
    return [{"name": name, "nominalQuota": values[name]} for name in covered]


def _pool_quota(pool: PoolView, gpus: int) -> tuple[int, int]:
    return cpu_for_gpus(pool, gpus), memory_gib_for_gpus(pool, gpus)


def cohort(policy: SchedulingPolicy, pools: Sequence[PoolView], covered: list[str]) -> dict[str, Any]:
    """The cohort holds the capacity no team has as quota, so it is borrowable rather than idle."""
    flavors = []
    for pool in pools:
        spare = leftover_gpus(policy, pool)
        if spare:
            resources = _flavor_resources(pool, covered, spare, *_pool_quota(pool, spare))
            flavors.append({"name": pool.name, "resources": resources})
    spec: dict[str, Any] = {}
    if flavors:
        spec["resourceGroups"] = [{"coveredResources": covered, "flavors": flavors}]
    return {"apiVersion": API, "kind": "Cohort", "metadata": _meta(policy.cohort), "spec": spec}


def _team_flavor(team: TeamPolicy, pool: PoolView, covered: list[str]) -> dict[str, Any]:
    gpus = team.quotas.get(pool.name, 0)
    resources = _flavor_resources(pool, covered, gpus, *_pool_quota(pool, gpus))
    own = next(r for r in resources if r["name"] == gpu_resource(pool))
    if team.borrowing_limit is not None:
        own["borrowingLimit"] = gpu_units(pool, team.borrowing_limit)
    if team.lending_limit is not None:
        own["lendingLimit"] = gpu_units(pool, lendable(team, pool))
    return {"name": pool.name, "resources": resources}


def cluster_queue(
    policy: SchedulingPolicy, team: TeamPolicy, pools: Sequence[PoolView], covered: list[str]
) -> dict[str, Any]:
    # The team's own pools first: with TryNextFlavor Kueue still prefers a flavor that needs no borrowing.
    ordered = sorted(pools, key=lambda p: team.quotas.get(p.name, 0) == 0)
    flavors = [
        {
            "name": CPU_FLAVOR,
            "resources": _flavor_resources(None, covered, 0, team.cpu_quota, team.memory_quota_gib),
        }
    ]
    flavors += [_team_flavor(team, pool, covered) for pool in ordered]
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
        "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
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
        "spec": {"provisioningClassName": PROVISIONING_CLASS, "managedResources": covered[2:]},
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
    covered = ["cpu", "memory", *covered_gpu_resources(pools)]
    out = priority_classes(policy) + resource_flavors(pools)
    if policy.provisioning_requests:
        out += provisioning(covered)
    out.append(cohort(policy, pools, covered))
    out += [cluster_queue(policy, team, pools, covered) for team in policy.teams]
    out += [local_queue(team) for team in policy.teams]
    return out
