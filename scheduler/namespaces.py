"""Team namespaces: Pod Security `baseline`, a GPU ceiling quota, container defaults, RBAC for the team's groups.

Why the ResourceQuota is a ceiling and not a zero: Kueue-admitted pods are ordinary pods, so a quota of "0"
GPUs would block the admitted jobs too. What keeps unqueued pods off GPUs is Kueue itself
(manageJobsWithoutQueueName for namespaces labelled queue-managed, see kueue_config). The quota caps the
namespace at the most Kueue could ever admit for the team (quota + borrowing limit, within the pools), so it
never blocks admitted work but bounds the damage if Kueue is bypassed (e.g. its webhook is down).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.checks import max_admitted_gpus
from scheduler.kueue_config import QUEUE_MANAGED_LABEL, RELEASE_NAME
from scheduler.labels import metadata as _meta
from scheduler.model import PoolView, SchedulingPolicy, TeamPolicy
from scheduler.resources import covered_gpu_resources, gpu_resource, gpu_units

TEAM_LABEL = "gpufleet.io/team"
PRIORITY_LABEL = "gpufleet.io/default-priority"
GPU_QUOTA = "gpu-ceiling"
TEAM_ROLES = ("edit", f"{RELEASE_NAME}-batch-user-role")  # workloads + read access to queues and workloads


def namespace(policy: SchedulingPolicy, team: TeamPolicy) -> dict[str, Any]:
    version = f"v{policy.kubernetes_version}"
    labels = {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": version,
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/warn-version": version,
        TEAM_LABEL: team.name,
        QUEUE_MANAGED_LABEL: "true",
        PRIORITY_LABEL: team.priority,
    }
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(team.namespace, labels=labels)}


def gpu_ceiling(team: TeamPolicy, pools: Sequence[PoolView]) -> dict[str, int]:
    """Per GPU resource name: the most units Kueue could admit for this team."""
    ceiling = dict.fromkeys(covered_gpu_resources(pools), 0)
    for pool in pools:
        ceiling[gpu_resource(pool)] += gpu_units(pool, max_admitted_gpus(team, pool))
    return ceiling


def resource_quota(team: TeamPolicy, pools: Sequence[PoolView]) -> dict[str, Any]:
    hard = {f"requests.{name}": str(units) for name, units in gpu_ceiling(team, pools).items()}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(GPU_QUOTA, team.namespace),
        "spec": {"hard": hard},
    }


def limit_range(team: TeamPolicy) -> dict[str, Any]:
    """Requests for containers that set none, so Kueue and kube-scheduler account for every pod."""
    limits = [{"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}]
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta("defaults", team.namespace),
        "spec": {"limits": limits},
    }


def role_bindings(team: TeamPolicy) -> list[dict[str, Any]]:
    if not team.groups:
        return []
    subjects = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g} for g in team.groups]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(f"{team.name}-{role}", team.namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects,
        }
        for role in TEAM_ROLES
    ]


def team_objects(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for team in policy.teams:
        out += [namespace(policy, team), resource_quota(team, pools), limit_range(team), *role_bindings(team)]
    return out
