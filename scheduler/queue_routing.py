"""Which queue a team's job may name: CPU-only work in the `cpu` queue, GPU work in `default` or `topology`.

The quota of CPU-only work and the cores that come with GPUs live in different ClusterQueues (scheduler.kueue),
because Kueue's admission is quota-only: counted in one queue, CPU jobs would be admitted against cores that
sit on GPU nodes, which their pods can never use (the GPU taint), and the team's GPU jobs would then find no
cores left. So the admission policies send each job where its requests belong:

- a job none of whose pod templates requests a GPU resource must name the `cpu` queue
  (`kueue.x-k8s.io/queue-name: cpu`); on Kubernetes 1.36 and later a MutatingAdmissionPolicy fills that in for a
  job that names no queue or `default`, so only 1.35 users write it;
- a job that requests GPUs may not name the `cpu` queue (it has no GPU quota: Kueue would leave it pending).

The rule reads the queue label as admission sees it after Kueue's webhook, which gives a job without the label
the namespace's LocalQueue `default` (LocalQueueDefaulting, kueue v0.19.2 pkg/controller/jobframework/defaults.go);
an absent label counts as `default`. It runs on CREATE, and on UPDATE only when the label changes (a suspended
job may be moved to another queue; Kueue's own updates never touch it). Pods are routed only when nothing owns
them (bare pods): a controller's pods belong to a job whose template was checked, and only the cluster's
controllers may own a team pod (scheduler.ownership). A CronJob is routed by its job template's label, which its
Jobs carry.
"""

from __future__ import annotations

from typing import Any

from scheduler.kueue import CPU_QUEUE, LOCAL_QUEUE
from scheduler.podcel import no_gpu_request
from scheduler.vap import validation

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ROUTE_QUEUE = "gpufleet-team-cpu-queue"


def _queue(var: str) -> str:
    nested = "" if var in ("object", "oldObject") else f"has({var}.metadata) && "
    return (
        f"({nested}has({var}.metadata.labels) && '{QUEUE_LABEL}' in {var}.metadata.labels ? "
        f"{var}.metadata.labels['{QUEUE_LABEL}'] : '{LOCAL_QUEUE}')"
    )


def _changes_queue(holder: str) -> str:
    old = holder.replace("object", "oldObject", 1)
    return f"(request.operation == 'CREATE' || {_queue(old)} != {_queue(holder)})"


CPU_ONLY_JOB = f"variables.templates.all(t, {no_gpu_request('t')})"
CPU_ONLY_POD = no_gpu_request("object")
OWNED = "(has(object.metadata.ownerReferences) && size(object.metadata.ownerReferences) > 0)"
MOVE = f"label it {QUEUE_LABEL}: {CPU_QUEUE}"


def _checks(cpu_only: str, exempt: str, holder: str = "object") -> list[dict[str, Any]]:
    skip = f"!{_changes_queue(holder)}" + (f" || {exempt}" if exempt else "")
    in_cpu = f"{_queue(holder)} == '{CPU_QUEUE}'"
    return [
        validation(
            f"{skip} || !({cpu_only}) || {in_cpu}",
            f"work that requests no GPU goes to the {CPU_QUEUE!r} queue, whose quota is the team's CPU-only "
            f"allowance on the CPU nodes ({MOVE}); the GPU queues' cores are on GPU nodes it cannot use",
        ),
        validation(
            f"{skip} || {cpu_only} || !({in_cpu})",
            f"work that requests GPUs cannot use the {CPU_QUEUE!r} queue (it has no GPU quota); "
            f"name {LOCAL_QUEUE!r} or the topology queue",
        ),
    ]


def template_routing(holder: str = "object") -> list[dict[str, Any]]:
    """For the job kinds' policies (their `variables.templates` lists the job's pod templates); `holder` is
    where the queue label is (a CronJob's is on its job template, which its Jobs are made from)."""
    return _checks(CPU_ONLY_JOB, "", holder)


def pod_routing() -> list[dict[str, Any]]:
    """For the pods policy: bare pods only."""
    return _checks(CPU_ONLY_POD, OWNED)


SET_CPU_QUEUE = f"Object{{metadata: Object.metadata{{labels: {{'{QUEUE_LABEL}': '{CPU_QUEUE}'}}}}}}"


def route_condition(cpu_only: str) -> str:
    """Kubernetes 1.36+: a CPU-only job that names no queue, or `default`, is labelled for the `cpu` queue."""
    return f"{_queue('object')} == '{LOCAL_QUEUE}' && {cpu_only}"
