"""Only Kueue starts a team's job, only Kueue's elastic path resizes a running one, and a stopped GPU pod lets go
of its GPUs within a bounded grace.

Kueue corrects a job started or resized by hand only after the fact: it suspends a running job that has no
admitted Workload, and stops a job whose pod sets no longer match its Workload (kueue v0.19.2
pkg/controller/jobframework/reconciler.go, "Running job is not admitted by a cluster queue, suspending", and the
stop on "No matching Workload"); its Job webhook checks neither `suspend` nor `parallelism` on update
(pkg/controller/jobs/job/job_webhook.go validateUpdate). In between, the job's controller creates pods and the
scheduler binds them to GPUs, and a deleted pod keeps running for its `terminationGracePeriodSeconds`
(kubernetes.io "Termination of Pods"). So, on every job kind Kueue starts by lifting a suspend flag:

- only a platform controller (scheduler.identities: Kueue, and the operators that resume their own children,
  e.g. JobSet's controller unsuspends its Jobs, jobset v0.12.0 pkg/controllers/jobset_controller.go resumeJob)
  sets `spec.suspend` (`spec.runPolicy.suspend` for Kubeflow kinds) from true to false; a member may suspend;
- no one else changes a job's size (parallelism, completions, replica counts) while it is not suspended,
  except an elastic job (annotation `kueue.x-k8s.io/elastic-job: "true"`, which Kueue keeps immutable, on the
  kinds that support it: Job, RayCluster, RayJob), whose new pods wait behind Kueue's `kueue.x-k8s.io/elastic-job`
  gate until Kueue admits the larger slice (kueue v0.19.2 pkg/controller/elasticjobs/elastic_job_ungater.go);
- a team GPU pod, and every GPU pod template, asks at most `scheduling.maxTerminationGracePeriod` (5m by
  default), and a member's deletion or eviction may not ask a longer grace than that.
"""

from __future__ import annotations

from typing import Any

from scheduler.checks import seconds
from scheduler.identities import trusted
from scheduler.job_kinds import TEMPLATES, enabled_kinds
from scheduler.model import SchedulingPolicy
from scheduler.podcel import gated, no_gpu_request
from scheduler.vap import TEAM_NAMESPACES, rule, validating, validation

JOB_START = "gpufleet-team-job-start"
GRACE = "gpufleet-team-termination-grace"
ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"  # workloadslicing.EnabledAnnotationKey
ELASTIC_GATE = "kueue.x-k8s.io/elastic-job"  # v1beta2 ElasticJobSchedulingGate
ELASTIC_KINDS = (("batch", "jobs"), ("ray.io", "rayclusters"), ("ray.io", "rayjobs"))
KUBEFLOW_SUSPEND = "runPolicy"


def _or(var: str, path: str, default: str) -> str:
    return f"({_present(var, path)} ? {var}.{path} : {default})"


def _keyed(field: str, size: str) -> str:
    """A map of replica specs (Kubeflow): the same keys, each with the same `size` (over `s`)."""
    new, old = f"object.spec.{field}", f"oldObject.spec.{field}"
    same = size.replace("s.", f"{new}[k].") + " == " + size.replace("s.", f"{old}[k].")
    return (
        f"(has({new}) == has({old}) && (!has({new}) || (size({new}) == size({old}) && "
        f"{new}.all(k, k in {old} && {same}))))"
    )


def _present(var: str, path: str) -> str:
    """Every field along `path` (below `spec`) is set."""
    parts = path.split(".")
    return " && ".join(f"has({var}.{'.'.join(parts[: i + 1])})" for i in range(1, len(parts)))


def _listed(path: str, size: str) -> str:
    """A list of groups (JobSet, Ray): the same sizes (over `g`), in order."""
    sizes = {
        var: f"({_present(var, path)} ? {var}.{path}.map(g, {size}) : [])" for var in ("object", "oldObject")
    }
    return f"({sizes['object']} == {sizes['oldObject']})"


RAY_GROUP = (
    "g.groupName + '=' + string(has(g.replicas) ? g.replicas : -1) + '/' + string(has(g.minReplicas) ? "
    "g.minReplicas : -1) + '/' + string(has(g.maxReplicas) ? g.maxReplicas : -1) + '/' + "
    "string(has(g.numOfHosts) ? g.numOfHosts : 1)"
)
JOBSET_GROUP = (
    "g.name + '=' + string(has(g.replicas) ? g.replicas : 1) + '/' + string(has(g.template.spec.parallelism) ? "
    "g.template.spec.parallelism : 1) + '/' + string(has(g.template.spec.completions) ? "
    "g.template.spec.completions : -1)"
)
REPLICAS = "(has(s.replicas) ? s.replicas : 1)"

# Kind -> (the suspend flag's parent field, CEL: the job's size is what it was).
SIZES: dict[tuple[str, str], tuple[str, str]] = {
    ("batch", "jobs"): (
        "spec",
        " && ".join(
            f"{_or('object', f'spec.{f}', d)} == {_or('oldObject', f'spec.{f}', d)}"
            for f, d in (("parallelism", "1"), ("completions", "-1"))
        ),
    ),
    ("jobset.x-k8s.io", "jobsets"): ("spec", _listed("spec.replicatedJobs", JOBSET_GROUP)),
    ("kubeflow.org", "pytorchjobs"): (f"spec.{KUBEFLOW_SUSPEND}", _keyed("pytorchReplicaSpecs", REPLICAS)),
    ("kubeflow.org", "mpijobs"): (f"spec.{KUBEFLOW_SUSPEND}", _keyed("mpiReplicaSpecs", REPLICAS)),
    ("trainer.kubeflow.org", "trainjobs"): (
        "spec",
        f"{_or('object', 'spec.trainer.numNodes', '-1')} == {_or('oldObject', 'spec.trainer.numNodes', '-1')}",
    ),
    ("ray.io", "rayclusters"): ("spec", _listed("spec.workerGroupSpecs", RAY_GROUP)),
    ("ray.io", "rayjobs"): ("spec", _listed("spec.rayClusterSpec.workerGroupSpecs", RAY_GROUP)),
}


def suspended(var: str, parent: str) -> str:
    return f"(has({var}.{parent}) && has({var}.{parent}.suspend) && {var}.{parent}.suspend)"


def _elastic(kind: tuple[str, str]) -> str:
    """The job was created elastic and its templates still carry Kueue's elastic gate."""
    if kind not in ELASTIC_KINDS:
        return "false"
    annotated = (
        f"(has(oldObject.metadata.annotations) && '{ELASTIC_ANNOTATION}' in oldObject.metadata.annotations && "
        f"oldObject.metadata.annotations['{ELASTIC_ANNOTATION}'] == 'true')"
    )
    return f"({annotated} && variables.templates.all(t, {gated('t', ELASTIC_GATE)}))"


def job_start_policies(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    """One policy per job kind the stack enables that Kueue starts by lifting a suspend flag (on UPDATE)."""
    out: list[dict[str, Any]] = []
    by = trusted(policy)
    for kind in enabled_kinds():
        if kind not in SIZES:
            continue
        parent, same_size = SIZES[kind]
        starts = f"{suspended('oldObject', parent)} && !{suspended('object', parent)}"
        checks = [
            validation(
                f"{by} || !({starts})",
                f"only Kueue starts a job in a team namespace: it lifts {parent}.suspend when it admits the job's "
                "Workload (a job started by hand binds GPUs before Kueue stops it); a member may suspend a job",
            ),
            validation(
                f"{by} || {suspended('oldObject', parent)} || ({same_size}) || {_elastic(kind)}",
                "a running job keeps its size (parallelism, completions, replicas) unless Kueue resizes it: suspend "
                f'it first, or create it elastic ({ELASTIC_ANNOTATION}: "true" on a Job, RayCluster or RayJob)',
            ),
        ]
        group, resource = kind
        variables = {"templates": TEMPLATES[kind]} if kind in ELASTIC_KINDS else None
        out += validating(
            f"{JOB_START}-{resource}",
            [rule(group, [resource], ["UPDATE"])],
            TEAM_NAMESPACES,
            checks,
            variables,
        )
    return out


def grace_seconds(policy: SchedulingPolicy) -> int:
    return seconds(policy.max_termination_grace_period)


def grace_capped(var: str, policy: SchedulingPolicy) -> str:
    """CEL: the pod (or template) `var` requests no GPU, or asks at most the stack's termination grace."""
    field = f"{var}.spec.terminationGracePeriodSeconds"
    return f"({no_gpu_request(var)}) || !has({field}) || {field} <= {grace_seconds(policy)}"


def grace_message(policy: SchedulingPolicy, what: str) -> str:
    return (
        f"{what} asks a terminationGracePeriodSeconds above {grace_seconds(policy)} "
        "(gpufleet:scheduling.maxTerminationGracePeriod): a stopped or preempted pod keeps its GPUs for that long"
    )


def grace_policy(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    """A member's deletion (DELETE with gracePeriodSeconds) or eviction (deleteOptions) of a team pod may not
    ask a longer grace than the cap: the pod would keep its GPUs while its job's controller replaces it."""
    cap = grace_seconds(policy)
    delete = (
        f"request.operation != 'DELETE' || {no_gpu_request('oldObject')} || !has(request.options) || "
        f"!has(request.options.gracePeriodSeconds) || request.options.gracePeriodSeconds <= {cap}"
    )
    evict = (
        "request.operation != 'CREATE' || !has(object.deleteOptions) || "
        f"!has(object.deleteOptions.gracePeriodSeconds) || object.deleteOptions.gracePeriodSeconds <= {cap}"
    )
    check = validation(
        f"{trusted(policy)} || (({delete}) && ({evict}))",
        f"a team pod's deletion or eviction may ask at most {cap} s of grace "
        "(gpufleet:scheduling.maxTerminationGracePeriod): it would keep its GPUs that long",
    )
    rules = [rule("", ["pods"], ["DELETE"]), rule("", ["pods/eviction"], ["CREATE"])]
    return validating(GRACE, rules, TEAM_NAMESPACES, [check])
