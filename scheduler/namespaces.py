"""Team namespaces: Pod Security `baseline`, a ceiling quota (GPUs, cores, memory), container defaults, RBAC for the team's groups.

Why the ResourceQuota is a ceiling and not a zero: Kueue-admitted pods are ordinary pods, so a quota of "0"
GPUs would block the admitted jobs too. What keeps unqueued pods off GPUs is Kueue itself
(manageJobsWithoutQueueName for namespaces labelled queue-managed, see kueue_config) and the admission rules
that keep work inside it (scheduler.ownership, scheduler.job_control). The quota caps the namespace at the most
Kueue could ever admit for the team, so it never blocks admitted GPU work but bounds the damage if Kueue is
bypassed (e.g. a job created while Kueue's webhook was down and its failure policy let it through): GPUs at
quota + borrowing limit, within the pools; cores and memory at what those GPUs may ask (their share of the
pools' nodes, the bound scheduler.gpu_share puts on every GPU pod) plus every team's CPU-only allowance (the
most the team's `cpu` queue can hold, borrowing included). A GPU job's pods that ask no GPU (a Ray head, an MPI
launcher) share that allowance.

Network: every team namespace denies ingress by default and allows it from its own pods and from the
platform's namespaces (Prometheus's, the ingress controller's), and lets the KubeRay operator reach each Ray
head's dashboard, through which it submits and follows RayJobs (ray-project/kuberay v1.5.0
ray-operator/controllers/ray/rayjob_controller.go: `GetJobInfo` on the dashboard client, direct HTTP; without
it every RayJob is marked Failed once its submitter ends). Kueue, JobSet and the
Kubeflow training operator never connect to pods (the API server calls their webhooks). NetworkPolicies only bite where the CNI enforces them (on
EKS infra turns on the VPC CNI's policy agent; on existing clusters preflight says whether the CNI does).

Read access: team groups may list the cluster-scoped Kueue objects that describe their queues (ClusterQueues,
ResourceFlavors, WorkloadPriorityClasses, Cohorts), which the chart's batch-user role does not grant.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil
from typing import Any

from scheduler.checks import max_admitted_gpus
from scheduler.gpu_share import unit_shares
from scheduler.kueue_config import QUEUE_MANAGED_LABEL, RELEASE_NAME
from scheduler.labels import metadata as _meta
from scheduler.model import PoolView, SchedulingPolicy, TeamPolicy
from scheduler.resources import covered_gpu_resources, gpu_resource, gpu_units
from scheduler.tenancy import EXTERNAL_SERVICES_LABEL, PRIORITY_LABEL

TEAM_LABEL = "gpufleet.io/team"
GPU_QUOTA = "gpu-ceiling"
TEAM_ROLES = ("edit", f"{RELEASE_NAME}-batch-user-role")  # workloads + read access to queues and workloads
QUEUE_READER = "gpufleet-queue-reader"
QUEUE_READ_RESOURCES = ("clusterqueues", "resourceflavors", "workloadpriorityclasses", "cohorts")
DEFAULT_DENY = "default-deny-ingress"
ALLOW_PLATFORM = "allow-same-namespace-and-platform"
ALLOW_KUBERAY = "allow-kuberay-operator-to-ray-heads"
# kuberay v1.5.0: ray-operator/controllers/ray/utils/constant.go (RayNodeTypeLabelKey, DefaultDashboardPort) and
# helm-chart/kuberay-operator/templates/deployment.yaml (pod label app.kubernetes.io/name: the chart's name).
RAY_HEAD = {"ray.io/node-type": "head"}
RAY_DASHBOARD_PORT = 8265
KUBERAY_OPERATOR = {"app.kubernetes.io/name": "kuberay-operator"}


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
        **({EXTERNAL_SERVICES_LABEL: "allowed"} if team.external_services else {}),
    }
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(team.namespace, labels=labels)}


def gpu_ceiling(team: TeamPolicy, pools: Sequence[PoolView]) -> dict[str, int]:
    """Per GPU resource name: the most units Kueue could admit for this team."""
    ceiling = dict.fromkeys(covered_gpu_resources(pools), 0)
    for pool in pools:
        ceiling[gpu_resource(pool)] += gpu_units(pool, max_admitted_gpus(team, pool))
    return ceiling


def cpu_ceiling(policy: SchedulingPolicy, team: TeamPolicy, pools: Sequence[PoolView]) -> tuple[int, int]:
    """Cores and GiB: what the team's most admitted GPUs may ask, and the most its `cpu` queue can hold."""
    shares = unit_shares(pools)
    cpu = memory = 0
    for pool in pools:
        units = gpu_units(pool, max_admitted_gpus(team, pool))
        per_cpu, per_gib = shares[gpu_resource(pool)]
        cpu, memory = cpu + ceil(units * per_cpu), memory + ceil(units * per_gib)
    cpu_only = sum(t.cpu_quota for t in policy.teams), sum(t.memory_quota_gib for t in policy.teams)
    return cpu + cpu_only[0], memory + cpu_only[1]


def resource_quota(policy: SchedulingPolicy, team: TeamPolicy, pools: Sequence[PoolView]) -> dict[str, Any]:
    hard = {f"requests.{name}": str(units) for name, units in gpu_ceiling(team, pools).items()}
    cpu, memory = cpu_ceiling(policy, team, pools)
    hard |= {"requests.cpu": str(cpu), "requests.memory": f"{memory}Gi"}
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


def network_policies(policy: SchedulingPolicy, team: TeamPolicy) -> list[dict[str, Any]]:
    """Deny all ingress, then allow it from the namespace itself and the platform's namespaces, and from the
    KubeRay operator to Ray heads' dashboards."""
    api = "networking.k8s.io/v1"
    deny = {"podSelector": {}, "policyTypes": ["Ingress"]}
    peers: list[dict[str, Any]] = [{"podSelector": {}}] + [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
        for ns in policy.platform_namespaces
    ]
    allow = {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": peers}]}
    operator = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": policy.kuberay_namespace}},
        "podSelector": {"matchLabels": dict(KUBERAY_OPERATOR)},
    }
    kuberay = {
        "podSelector": {"matchLabels": dict(RAY_HEAD)},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [operator], "ports": [{"protocol": "TCP", "port": RAY_DASHBOARD_PORT}]}],
    }
    return [
        {"apiVersion": api, "kind": "NetworkPolicy", "metadata": _meta(name, team.namespace), "spec": spec}
        for name, spec in ((DEFAULT_DENY, deny), (ALLOW_PLATFORM, allow), (ALLOW_KUBERAY, kuberay))
    ]


def queue_reader(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    """A ClusterRole to read the queue objects, bound cluster-wide to every team group (none without groups)."""
    groups = sorted({g for team in policy.teams for g in team.groups})
    if not groups:
        return []
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(QUEUE_READER),
        "rules": [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": list(QUEUE_READ_RESOURCES),
                "verbs": ["get", "list", "watch"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(QUEUE_READER),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": QUEUE_READER},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g} for g in groups],
    }
    return [role, binding]


def team_objects(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for team in policy.teams:
        out += [
            namespace(policy, team),
            resource_quota(policy, team, pools),
            limit_range(team),
            *role_bindings(team),
        ]
        out += network_policies(policy, team)
    return out + queue_reader(policy)
