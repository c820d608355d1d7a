"""The team pod rules on the pod templates of every job kind a member may create, checked when the job is.

A Job (JobSet, PyTorchJob, RayJob, Deployment...) whose template breaks a pod rule would be admitted by Kueue and
hold the team's quota while its controller's pod creations are refused, until waitForPodsReady evicts it,
requeued forever. So the job is refused when it is created. The kinds and where their templates are:
scheduler.job_kinds; the pod rules themselves: scheduler.admission.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.gpu_share import share_message, within_share
from scheduler.identities import BY_USER
from scheduler.job_control import grace_capped, grace_message
from scheduler.job_kinds import CRONJOBS, TEMPLATES, checked_kinds
from scheduler.labels import GPU_TAINT_KEY, GPU_TAINT_VALUE, SECONDARY_SCHEDULER_NAME, SHARED_GPU_RESOURCE
from scheduler.model import PoolView, SchedulingPolicy
from scheduler.podcel import (
    VISIBLE_DEVICES,
    at_most_one_shared,
    no_gpu_request,
    no_visible_devices,
    no_zero_gpu,
    tolerates_gpu_taint,
    zero_gpu_message,
)
from scheduler.queue_routing import template_routing
from scheduler.tenancy import pod_priority_allowed, pod_priority_message
from scheduler.vap import TEAM_NAMESPACES, rule, supports_mutating_policies, validating, validation

TEMPLATE_POLICY = "gpufleet-team-pod-templates"
# Checked on UPDATE only where the old templates kept them (see scheduler.admission.ratchet): a job created before
# a rule existed can still be updated, so Kueue can start it.
RATCHETED = ("visible", "shared", "priority", "share", "grace", "zero")


def _template_checks(var: str, policy: SchedulingPolicy, pools: Sequence[PoolView]) -> dict[str, str]:
    return {
        "visible": no_visible_devices(var),
        "shared": at_most_one_shared(var),
        "priority": pod_priority_allowed(var, policy),
        "node": f"!has({var}.spec.nodeName) || {var}.spec.nodeName == ''",
        "toleration": f"!{tolerates_gpu_taint(var)} || !({no_gpu_request(var)})",
        "scheduler": (
            f"({no_gpu_request(var)}) || (has({var}.spec.schedulerName) && {var}.spec.schedulerName == "
            f"'{SECONDARY_SCHEDULER_NAME}')"
        ),
        "share": within_share(var, pools),
        "grace": grace_capped(var, policy),
        "zero": no_zero_gpu(var),
    }


def template_validations(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """The pod rules, on every template of the job (`variables.templates`)."""
    checks = _template_checks("t", policy, pools)
    every = {name: f"variables.templates.all(t, {expr})" for name, expr in checks.items()}
    for kept in RATCHETED:
        every[kept] = (
            f"(request.operation == 'UPDATE' && !(variables.oldTemplates.all(t, {checks[kept]}))) || {every[kept]}"
        )
    out = [
        validation(every["visible"], f"a pod template in a team namespace sets {VISIBLE_DEVICES}; request a GPU resource instead"),
        validation(every["shared"], f"a pod template asks more than one {SHARED_GPU_RESOURCE} in a container (one time-sliced replica at most)"),
        validation(every["priority"], pod_priority_message(policy)),
        validation(every["node"], "a pod template sets spec.nodeName: the scheduler binds pods after Kueue admits the job"),
        # Kueue writes the admitted flavor's node selector and tolerations into a job's template when it starts
        # it; that update is Kueue's, and the toleration rule is the user's to obey at creation.
        validation(f"!({BY_USER}) || {every['toleration']}",
                   f"a pod template tolerates the {GPU_TAINT_KEY}={GPU_TAINT_VALUE} taint without a GPU request; "
                   "Kueue adds the toleration when it admits a GPU job"),
        validation(every["share"], share_message(pools, "a pod template")),
        validation(every["grace"], grace_message(policy, "a GPU pod template")),
    ]  # fmt: skip
    if policy.tolerates_named_gpus:
        out.insert(0, validation(every["zero"], zero_gpu_message("a container of a pod template")))
    if policy.uses_secondary_scheduler and not supports_mutating_policies(policy.kubernetes_version):
        out.append(
            validation(
                every["scheduler"],
                f"a pod template requests GPUs without schedulerName: {SECONDARY_SCHEDULER_NAME}, the scheduler that "
                "packs GPUs (on this Kubernetes minor nothing fills it in); its pods would be refused after Kueue "
                "admitted the job",
            )
        )
    return out


def template_policies(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """One policy per checked kind (its templates' CEL path differs), all bound with Deny."""
    out: list[dict[str, Any]] = []
    validations = template_validations(policy, pools)
    for kind in checked_kinds():
        group, resource = kind
        # A CronJob's Jobs get their labels (the queue's among them) from its job template.
        holder = "object.spec.jobTemplate" if kind == CRONJOBS else "object"
        old = TEMPLATES[kind].replace("object.", "oldObject.")
        variables = {
            "templates": TEMPLATES[kind],
            "oldTemplates": f"request.operation == 'UPDATE' ? ({old}) : []",
        }
        out += validating(
            f"{TEMPLATE_POLICY}-{resource}",
            [rule(group, [resource], ["CREATE", "UPDATE"])],
            TEAM_NAMESPACES,
            validations + template_routing(holder),
            variables,
        )
    return out
