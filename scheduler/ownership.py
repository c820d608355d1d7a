"""Who may own a team's pods and jobs: in a team namespace only the cluster's controllers set a controller
ownerReference.

Kueue does not queue work whose controller is one of its jobs: its pod webhook adds no gate to a pod, and its
job webhooks do not suspend a job, when `FindAncestorJobManagedByKueue` finds a Kueue-managed ancestor by
following controller ownerReferences, and a Pod is such an ancestor while the `pod` integration is on (kueue
v0.19.2 pkg/controller/jobs/pod/pod_webhook.go "Do not suspend a Pod whose owner is already managed by Kueue",
pkg/controller/jobframework/utils.go, pkg/controller/jobs/pod/pod_controller.go `JobType: &corev1.Pod{}`). The
ancestor only has to exist in the same namespace with a matching UID: Kueue calls "same-namespace ownership
spoofing" out of its scope (pkg/controller/jobframework/reconciler.go, FindAncestorJobManagedByKueue). A
member who writes a controller reference to their own Job or pod would run pods and jobs with no Workload and
no quota. So on pods and on every job and workload kind in a team namespace:

- a controller ownerReference is set only by a platform controller (scheduler.identities: the job controller,
  the ReplicaSet and StatefulSet controllers, the frameworks' operators, Kueue), never by a member or a team's
  ServiceAccount (Spark's driver, which gives its executors a controller reference to the driver pod, is one:
  docs/scheduling.md says how Spark runs queued);
- on update, a controller reference must be one the old object already had as a controller; dropping one
  (the garbage collector and controllers releasing a pod) is always allowed.
"""

from __future__ import annotations

from typing import Any

from scheduler.identities import trusted
from scheduler.job_kinds import CRONJOBS, FRAMEWORK_RESOURCES, UNQUEUED_WORKLOADS, job_rules
from scheduler.model import SchedulingPolicy
from scheduler.vap import TEAM_NAMESPACES, validating, validation

OWNERS = "gpufleet-team-owners"
CONTROLLERS = (
    "has(object.metadata.ownerReferences) ? "
    "object.metadata.ownerReferences.filter(o, has(o.controller) && o.controller) : []"
)
KEPT = (
    "request.operation == 'UPDATE' && has(oldObject.metadata.ownerReferences) && "
    "oldObject.metadata.ownerReferences.exists(p, p.uid == o.uid && has(p.controller) && p.controller)"
)


def owned_kinds() -> list[tuple[str, str]]:
    """Pods, every Kueue integration's kind, CronJobs and the workload kinds no integration queues."""
    kinds = list(dict.fromkeys([*FRAMEWORK_RESOURCES.values(), CRONJOBS, *UNQUEUED_WORKLOADS]))
    return kinds


def ownership_policy(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    check = validation(
        f"{trusted(policy)} || variables.controllers.all(o, {KEPT})",
        "in a team namespace only the cluster's controllers set a controller ownerReference on pods and jobs: "
        "work owned by one of the team's own jobs or pods would skip the team's Kueue queue and quota; create "
        "the job itself and let its controller make its pods",
    )
    rules = job_rules(["CREATE", "UPDATE"], owned_kinds())
    return validating(OWNERS, rules, TEAM_NAMESPACES, [check], {"controllers": CONTROLLERS})
