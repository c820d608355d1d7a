"""The kinds a team member can create that run pods: which Kueue queues as one job, where their pod templates
are, and the policy that refuses the others in team namespaces.

A member gets role `edit` and Kueue's `kueue-batch-user-role` in the team namespace (scheduler.namespaces):
between them every Kueue integration's editor role (kueue v0.19.2 charts/kueue/templates/rbac/*_editor_role.yaml,
label `rbac.kueue.x-k8s.io/batch-user: "true"`) and `edit`'s DaemonSets, ReplicaSets, ReplicationControllers
and CronJobs. What the stack enables (kueue_config.FRAMEWORKS) is queued as one job, all-or-nothing, and its
templates are checked when it is created (scheduler.pod_templates). A CronJob's Jobs are Jobs (queued and
checked when its controller creates them), and its template is checked when it is created. Everything else is
refused when a member creates it, because Kueue would meet its pods one by one as plain pods, with no
all-or-nothing admission, and its templates would be refused only pod by pod:
- the Kueue integrations the stack does not enable (TFJob, XGBoostJob, PaddleJob, JAXJob, RayService,
  SparkApplication, AppWrapper: kueue v0.19.2 pkg/controller/jobframework/integrationmanager.go knows them as
  owners, not as managed jobs);
- DaemonSets, ReplicaSets and ReplicationControllers: a Deployment makes its ReplicaSets through the deployment
  controller (a trusted identity, scheduler.identities), which stays allowed.
"""

from __future__ import annotations

from typing import Any

from scheduler.identities import trusted
from scheduler.kueue_config import FRAMEWORKS
from scheduler.model import SchedulingPolicy
from scheduler.vap import TEAM_NAMESPACES, rule, validating, validation

# Every integration Kueue v0.19.2 registers (pkg/controller/jobs/*: each `FrameworkName`) -> (API group, resource).
FRAMEWORK_RESOURCES = {
    "batch/job": ("batch", "jobs"),
    "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets"),
    "kubeflow.org/mpijob": ("kubeflow.org", "mpijobs"),
    "kubeflow.org/pytorchjob": ("kubeflow.org", "pytorchjobs"),
    "kubeflow.org/tfjob": ("kubeflow.org", "tfjobs"),
    "kubeflow.org/xgboostjob": ("kubeflow.org", "xgboostjobs"),
    "kubeflow.org/paddlejob": ("kubeflow.org", "paddlejobs"),
    "kubeflow.org/jaxjob": ("kubeflow.org", "jaxjobs"),
    "trainer.kubeflow.org/trainjob": ("trainer.kubeflow.org", "trainjobs"),
    "ray.io/rayjob": ("ray.io", "rayjobs"),
    "ray.io/raycluster": ("ray.io", "rayclusters"),
    "ray.io/rayservice": ("ray.io", "rayservices"),
    "sparkoperator.k8s.io/sparkapplication": ("sparkoperator.k8s.io", "sparkapplications"),
    "workload.codeflare.dev/appwrapper": ("workload.codeflare.dev", "appwrappers"),
    "leaderworkerset.x-k8s.io/leaderworkerset": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    "pod": ("", "pods"),
    "deployment": ("apps", "deployments"),
    "statefulset": ("apps", "statefulsets"),
}
CRONJOBS = ("batch", "cronjobs")
# Workload kinds of `edit` that no integration queues as a whole.
UNQUEUED_WORKLOADS = (("apps", "daemonsets"), ("apps", "replicasets"), ("", "replicationcontrollers"))
REFUSED_KINDS = "gpufleet-team-job-kinds"

# Kind (group, resource) -> CEL list of the PodTemplateSpecs in its object (each with `.spec`).
TEMPLATES: dict[tuple[str, str], str] = {
    ("batch", "jobs"): "[object.spec.template]",
    CRONJOBS: "[object.spec.jobTemplate.spec.template]",
    ("apps", "deployments"): "[object.spec.template]",
    ("apps", "statefulsets"): "[object.spec.template]",
    ("jobset.x-k8s.io", "jobsets"): (
        "has(object.spec.replicatedJobs) ? object.spec.replicatedJobs.map(r, r.template.spec.template) : []"
    ),
    ("kubeflow.org", "pytorchjobs"): (
        "has(object.spec.pytorchReplicaSpecs) ? object.spec.pytorchReplicaSpecs.map(k, "
        "object.spec.pytorchReplicaSpecs[k].template) : []"
    ),
    ("kubeflow.org", "mpijobs"): (
        "has(object.spec.mpiReplicaSpecs) ? object.spec.mpiReplicaSpecs.map(k, object.spec.mpiReplicaSpecs[k].template) : []"
    ),
    ("ray.io", "rayclusters"): (
        "[object.spec.headGroupSpec.template] + (has(object.spec.workerGroupSpecs) ? "
        "object.spec.workerGroupSpecs.map(g, g.template) : [])"
    ),
    ("ray.io", "rayjobs"): (
        "has(object.spec.rayClusterSpec) ? [object.spec.rayClusterSpec.headGroupSpec.template] + "
        "(has(object.spec.rayClusterSpec.workerGroupSpecs) ? object.spec.rayClusterSpec.workerGroupSpecs.map(g, "
        "g.template) : []) : []"
    ),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): (
        "[object.spec.leaderWorkerTemplate.workerTemplate] + (has(object.spec.leaderWorkerTemplate.leaderTemplate) "
        "? [object.spec.leaderWorkerTemplate.leaderTemplate] : [])"
    ),
}


def enabled_kinds() -> list[tuple[str, str]]:
    """(group, resource) of every integration the stack enables, in FRAMEWORKS order."""
    return [FRAMEWORK_RESOURCES[framework] for framework in FRAMEWORKS]


def checked_kinds() -> list[tuple[str, str]]:
    """The kinds whose pod templates are checked when they are created: the enabled ones that have templates,
    and CronJobs."""
    return [kind for kind in enabled_kinds() if kind in TEMPLATES] + [CRONJOBS]


def job_rules(operations: list[str], kinds: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Rules matching these kinds (default: every enabled integration's), one per API group."""
    by_group: dict[str, list[str]] = {}
    for group, resource in enabled_kinds() if kinds is None else kinds:
        by_group.setdefault(group, []).append(resource)
    return [rule(group, resources, operations) for group, resources in by_group.items()]


def refused_kinds() -> list[tuple[str, str]]:
    enabled = set(enabled_kinds())
    unqueued = [kind for kind in FRAMEWORK_RESOURCES.values() if kind not in enabled]
    return unqueued + list(UNQUEUED_WORKLOADS)


def refused_kinds_policy(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    """Refuse creating the kinds no enabled integration queues as a whole, unless a platform controller does."""
    refused = ", ".join(resource for _, resource in refused_kinds())
    queued = ", ".join(resource for _, resource in enabled_kinds())
    check = validation(
        trusted(policy),
        f"Kueue does not queue this kind as one job on this cluster ({refused} are refused in team "
        f"namespaces); use one it queues: {queued}, or cronjobs",
    )
    return validating(REFUSED_KINDS, job_rules(["CREATE"], refused_kinds()), TEAM_NAMESPACES, [check])
