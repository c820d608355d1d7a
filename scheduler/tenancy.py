"""Team rules beyond pods: how a team may expose its work, protect it from drains, and prioritise it.

- Ingress and Gateway API routes are refused in team namespaces unless the team may expose Services
  (`allowExternalServices`): the shared ingress controller serves them to the internet as surely as a
  LoadBalancer Service would (the default `edit` role grants
  networking.k8s.io ingresses, kubernetes.io "Using RBAC Authorization", user-facing roles). The Gateway API
  kinds are matched by name whether or not their CRDs are installed.
- A PodDisruptionBudget may not forbid every eviction (`maxUnavailable: 0`, `0%`, or `minAvailable: 100%`, in
  any spelling the API accepts: `00%`, `0100%`): the cluster-autoscaler, Karpenter and EKS node-group updates
  honour PDBs, so one such budget on a long-running GPU Deployment pins its GPU nodes (kubernetes.io
  "Specifying a Disruption Budget": with maxUnavailable 0 or minAvailable 100% no voluntary eviction is ever
  allowed). The values are read as numbers: a percentage is `[0-9]+%` with leading zeros allowed
  (kubernetes/apimachinery v0.35.8 pkg/util/validation/validation.go, IsValidPercent). A `minAvailable` equal
  to the replica count of the pods it selects does the same, and admission cannot see that count: that one
  is the platform's to find (docs/scheduling.md). Kueue's preemption deletes pods and is not affected.
- A team pod or pod template may name a Kubernetes PriorityClass only from the stack's list
  (`scheduling.podPriorityClasses`, none by default; never `system-node-critical` / `system-cluster-critical`):
  Kueue takes a Workload's priority from its pods' PriorityClass when the job names no WorkloadPriorityClass
  (kueue v0.19.2 pkg/controller/jobframework/reconciler.go, ExtractPriority), which would lift it past the cap
  below, and kube-scheduler preempts lower-priority pods of any namespace for it.
- A job may name a WorkloadPriorityClass (`kueue.x-k8s.io/priority-class`) only up to its team's default
  (`teams[].priority`, the namespace's `gpufleet.io/default-priority` label): otherwise any team labels its
  jobs `production` and, while borrowing, preempts other teams' work.
"""

from __future__ import annotations

from typing import Any

from scheduler.model import SchedulingPolicy
from scheduler.vap import TEAM_NAMESPACES, rule, validating, validation

INGRESSES = "gpufleet-team-ingresses"
DISRUPTION_BUDGETS = "gpufleet-team-disruption-budgets"
PRIORITY_CAP = "gpufleet-team-priority-cap"
EXTERNAL_SERVICES_LABEL = "gpufleet.io/external-services"
PRIORITY_LABEL = "gpufleet.io/default-priority"  # on each team namespace: the team's default priority class
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
SYSTEM_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")
GATEWAY_ROUTES = ("httproutes", "grpcroutes", "tlsroutes", "tcproutes", "udproutes")

EXTERNAL_ALLOWED = (
    f"(has(namespaceObject.metadata.labels) && '{EXTERNAL_SERVICES_LABEL}' in namespaceObject.metadata.labels "
    f"&& namespaceObject.metadata.labels['{EXTERNAL_SERVICES_LABEL}'] == 'allowed')"
)


def ingress_policy() -> list[dict[str, Any]]:
    rules = [
        rule("networking.k8s.io", ["ingresses"], ["CREATE", "UPDATE"]),
        rule("gateway.networking.k8s.io", list(GATEWAY_ROUTES), ["CREATE", "UPDATE"]),
    ]
    check = validation(
        EXTERNAL_ALLOWED,
        "Ingresses and Gateway routes expose team pods outside the cluster; they are not allowed in this team "
        "namespace (teams[].allowExternalServices)",
    )
    return validating(INGRESSES, rules, TEAM_NAMESPACES, [check])


def _blocks_all(field: str, pattern: str) -> str:
    """An int-or-string field whose value (an integer, or a percentage with leading zeros) matches `pattern`."""
    return f"has(object.spec.{field}) && string(object.spec.{field}).matches('{pattern}')"


NO_EVICTION = f"{_blocks_all('maxUnavailable', '^0+%?$')} || {_blocks_all('minAvailable', '^0*100%$')}"


def disruption_budget_policy() -> list[dict[str, Any]]:
    rules = [rule("policy", ["poddisruptionbudgets"], ["CREATE", "UPDATE"])]
    check = validation(
        f"!({NO_EVICTION})",
        "a PodDisruptionBudget in a team namespace may not forbid every eviction (maxUnavailable 0 or "
        "minAvailable 100%): node drains, autoscaler scale-down and node updates would wait on it forever",
    )
    return validating(DISRUPTION_BUDGETS, rules, TEAM_NAMESPACES, [check])


def pod_priority_allowed(var: str, policy: SchedulingPolicy) -> str:
    """The pod (or template) `var` names no PriorityClass, or one of `scheduling.podPriorityClasses`."""
    name = f"{var}.spec.priorityClassName"
    return f"!has({name}) || {name} == '' || {name} in {list(policy.pod_priority_classes)!r}"


def pod_priority_message(policy: SchedulingPolicy) -> str:
    allowed = ", ".join(policy.pod_priority_classes) or "none"
    return (
        f"team pods may name only the PriorityClasses the platform allows (gpufleet:scheduling.podPriorityClasses: "
        f"{allowed}), never {' or '.join(SYSTEM_PRIORITY_CLASSES)}: a PriorityClass would set the Workload's "
        "priority past the team's WorkloadPriorityClass and let the scheduler preempt other teams' pods"
    )


def priority_values(policy: SchedulingPolicy) -> str:
    return "{" + ", ".join(f"'{pc.name}': {pc.value}" for pc in policy.priority_classes) + "}"


def priority_cap_policy(policy: SchedulingPolicy, job_rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """On CREATE, and on an UPDATE that changes the label (Kueue allows changing a job's priority class)."""
    values = priority_values(policy)
    label = f"object.metadata.labels['{KUEUE_PRIORITY_LABEL}']"
    has_label = f"has(object.metadata.labels) && '{KUEUE_PRIORITY_LABEL}' in object.metadata.labels"
    old = f"oldObject.metadata.labels['{KUEUE_PRIORITY_LABEL}']"
    old_same = (
        f"request.operation == 'UPDATE' && has(oldObject.metadata.labels) && "
        f"'{KUEUE_PRIORITY_LABEL}' in oldObject.metadata.labels && {old} == {label}"
    )
    team = f"namespaceObject.metadata.labels['{PRIORITY_LABEL}']"
    has_team = (
        f"has(namespaceObject.metadata.labels) && '{PRIORITY_LABEL}' in namespaceObject.metadata.labels"
    )
    names = [pc.name for pc in policy.priority_classes]
    known = validation(
        f"!({has_label}) || {label} in {values}",
        f"kueue.x-k8s.io/priority-class must name one of the stack's WorkloadPriorityClasses: {', '.join(names)}",
    )
    capped = validation(
        f"!({has_label}) || {old_same} || !({has_team}) || !({label} in {values}) || !({team} in {values}) || "
        f"{values}[{label}] <= {values}[{team}]",
        "a team's jobs may use priority classes up to its own (teams[].priority, this namespace's "
        f"{PRIORITY_LABEL} label)",
    )
    return validating(PRIORITY_CAP, job_rules, TEAM_NAMESPACES, [known, capped])
