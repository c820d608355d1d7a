"""Admission policies for team namespaces: what a team's pods and Services may ask for, and defaults they get.

Validating (admissionregistration.k8s.io/v1, every supported Kubernetes version), in namespaces labelled
`gpufleet.io/queue-managed=true` and nowhere else (the platform's namespaces are never matched):
- no container sets `NVIDIA_VISIBLE_DEVICES` (with the envvar device-list strategy, or a toolkit that accepts
  the variable from unprivileged containers, it would expose every GPU of the node);
- a pod that tolerates the GPU taint requests a GPU resource (a zero quantity is no request, scheduler.podcel),
  unless Kueue's topology-aware scheduling places it
  (a job controller's pod with Kueue's `kueue.x-k8s.io/topology` gate and without its admission gate); an
  update may add such a toleration only as Kueue's own ServiceAccount;
- only Kueue's ServiceAccount removes Kueue's scheduling gates (admission, topology, elastic-job), and no pod is
  created with `spec.nodeName` (both would let a pod skip the queue);
- a container requests at most one time-sliced GPU (`nvidia.com/gpu.shared`);
- a pod names a PriorityClass only from the stack's list (scheduler.tenancy), never the system ones (any
  namespace may use them by default, and kube-scheduler would preempt other teams' pods for them);
- a GPU pod asks at most its GPUs' share of a node's cores and memory (scheduler.gpu_share), and at most the
  stack's termination grace (scheduler.job_control);
- where the secondary scheduler binds GPU pods (`existing` clusters, and every platform with
  `placement.strategy: FragmentationAware`), a GPU pod names it (`schedulerName: gpu-binpack`), so GPUs are
  only ever bound by one scheduler;
- where the API server gives a pod that names a GPU resource the GPU taint's toleration (EKS), no container
  names one at 0 (its pod would tolerate the taint without a GPU, and be refused after Kueue admitted its job);
- what the Kueue release the twin runs gets wrong in enabled integrations (scheduler.kueue_gaps);
- no Service of type LoadBalancer or NodePort, unless the team's `allowExternalServices` is set (its namespace
  then carries `gpufleet.io/external-services=allowed`, which the policy reads), and no `externalIPs` at all.

The same rules hold for the pod templates of every job kind (scheduler.pod_templates); who may own team pods
and jobs (scheduler.ownership), which kinds a member may create (scheduler.job_kinds) and who starts and
resizes jobs (scheduler.job_control) have their own modules, composed here. What these decide is tested on the
real API server with Kueue's real webhooks (tests/twin).

Mutating (admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, GA and served by default from Kubernetes
1.36; before that the API is beta and off by default, so nothing is rendered and the docs say what to do):
- a job (every Kueue integration's kind) without `kueue.x-k8s.io/priority-class` gets the team's default
  WorkloadPriorityClass, read from its namespace's `gpufleet.io/default-priority` label;
- where the secondary scheduler binds GPU pods, a pod that leaves `schedulerName` at its default gets
  `gpu-binpack`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.gpu_share import share_message, within_share
from scheduler.identities import BY_KUEUE
from scheduler.job_control import ELASTIC_GATE, grace_capped, grace_message, grace_policy, job_start_policies
from scheduler.job_kinds import TEMPLATES, enabled_kinds, job_rules, refused_kinds_policy
from scheduler.kueue_gaps import kueue_gap_policies
from scheduler.labels import GPU_TAINT_KEY, GPU_TAINT_VALUE, SECONDARY_SCHEDULER_NAME, SHARED_GPU_RESOURCE
from scheduler.model import PoolView, SchedulingPolicy
from scheduler.ownership import ownership_policy
from scheduler.pod_templates import template_policies
from scheduler.podcel import (
    VISIBLE_DEVICES,
    at_most_one_shared,
    gated,
    no_gpu_request,
    no_visible_devices,
    no_zero_gpu,
    tolerates_gpu_taint,
    zero_gpu_message,
)
from scheduler.queue_routing import ROUTE_QUEUE, SET_CPU_QUEUE, pod_routing, route_condition
from scheduler.tenancy import (
    EXTERNAL_ALLOWED,
    KUEUE_PRIORITY_LABEL,
    PRIORITY_LABEL,
    disruption_budget_policy,
    ingress_policy,
    pod_priority_allowed,
    pod_priority_message,
    priority_cap_policy,
)
from scheduler.vap import TEAM_NAMESPACES, supports_mutating_policies
from scheduler.vap import mutating as _mutating
from scheduler.vap import rule as _rule
from scheduler.vap import validating as _validating
from scheduler.vap import validation as _validation

PODS = "gpufleet-team-pods"
SERVICES = "gpufleet-team-services"
DEFAULT_PRIORITY = "gpufleet-team-default-priority"
DEFAULT_SCHEDULER = "gpufleet-team-scheduler-name"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"  # Kueue's TopologySchedulingGate (apis/kueue/v1beta2, v0.19.2)
ADMISSION_GATE = (
    "kueue.x-k8s.io/admission"  # Kueue's pod-integration gate (pkg/controller/jobs/pod/constants)
)
KUEUE_GATES = (ADMISSION_GATE, TOPOLOGY_GATE, ELASTIC_GATE)

NO_VISIBLE_DEVICES = no_visible_devices("object")

# A pod Kueue places with topology-aware scheduling for a job integration: created by its job's controller
# (a controller ownerReference, which only the cluster's controllers set: scheduler.ownership) from the template
# Kueue wrote when it admitted the job, with the topology gate and without the admission gate. Kueue's pod
# webhook adds the topology gate to *every* pod it manages (bare, Deployment, StatefulSet pods) while TAS is
# on, but those also carry the admission gate until Kueue admits them (kueue v0.19.2
# pkg/controller/jobs/pod/pod_webhook.go), so the gate alone proves nothing.
PLACED_BY_KUEUE_TAS = (
    f"({gated('object', TOPOLOGY_GATE)} && !{gated('object', ADMISSION_GATE)} && "
    "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, has(o.controller) && o.controller))"
)
GPU_TOLERATION_NEEDS_GPU = (
    f"!{tolerates_gpu_taint('object')} || !({no_gpu_request('object')}) || "
    f"(request.operation == 'CREATE' && {PLACED_BY_KUEUE_TAS}) || "
    f"(request.operation != 'CREATE' && ({tolerates_gpu_taint('oldObject')} || {BY_KUEUE}))"
)
# Only Kueue lifts its gates: it does when it admits the pod's workload (or an elastic job's larger slice).
# Kueue's own webhook does not check gates on update (pod_webhook.go ValidateUpdate), so without this a member
# ungates their own pod and skips the queue.
KEEPS_KUEUE_GATES = f"request.operation == 'CREATE' || {BY_KUEUE} || " + " && ".join(
    f"(!{gated('oldObject', g)} || {gated('object', g)})" for g in KUEUE_GATES
)
# Binding is the scheduler's (pods/binding); a pod created with spec.nodeName skips it, and with it the
# queue's placement and every NoSchedule taint (the kubelet checks only NoExecute taints,
# kubernetes pkg/kubelet/lifecycle/predicate.go).
NO_NODE_NAME = "request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''"
# Time-sliced GPUs: the device plugin refuses more than one replica per container; refuse it up front instead.
AT_MOST_ONE_SHARED = at_most_one_shared("object")
GPU_PODS_USE_PACKING_SCHEDULER = (
    f"request.operation != 'CREATE' || ({no_gpu_request('object')}) || "
    f"(has(object.spec.schedulerName) && object.spec.schedulerName == '{SECONDARY_SCHEDULER_NAME}')"
)
NO_EXTERNAL_SERVICE = (
    f"{EXTERNAL_ALLOWED} || !has(object.spec.type) || !(object.spec.type in ['LoadBalancer', 'NodePort'])"
)
# A Service's externalIPs make kube-proxy capture that address for every pod and node of the cluster
# (CVE-2020-8554, kubernetes/kubernetes#97076, no fix upstream): refused for every team.
NO_EXTERNAL_IPS = "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0"


def ratchet(expression: str) -> str:
    """The rule on CREATE; on UPDATE only where the old object kept it: a pod that broke it before the policy
    existed (or before its namespace was team-managed) can still be updated, so Kueue can ungate it and remove
    its finalizer (a validation runs on every matched operation, kubernetes.io
    "Validating Admission Policy"). Pod specs are immutable but for a few fields, so no update makes it worse."""
    old = expression.replace("object.", "oldObject.")
    return f"(request.operation == 'UPDATE' && !({old})) || ({expression})"


def pod_validations(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    gates = ", ".join(KUEUE_GATES)
    named = [_validation(ratchet(no_zero_gpu("object")), zero_gpu_message("a container"))]
    out = [
        *(named if policy.tolerates_named_gpus else []),
        _validation(ratchet(NO_VISIBLE_DEVICES), f"containers in team namespaces may not set {VISIBLE_DEVICES}; request a GPU resource instead"),
        _validation(GPU_TOLERATION_NEEDS_GPU,
                    f"a pod that tolerates the {GPU_TAINT_KEY}={GPU_TAINT_VALUE} taint must request a GPU resource; "
                    "Kueue adds the toleration when it admits a GPU job"),
        _validation(KEEPS_KUEUE_GATES, f"only Kueue removes its scheduling gates ({gates}), when it admits the pod's workload"),
        _validation(NO_NODE_NAME, "team pods may not set spec.nodeName: the scheduler binds them after Kueue admits their workload"),
        _validation(ratchet(AT_MOST_ONE_SHARED), f"a container may request at most one {SHARED_GPU_RESOURCE} (one time-sliced replica)"),
        _validation(ratchet(pod_priority_allowed("object", policy)), pod_priority_message(policy)),
        _validation(ratchet(within_share("object", pools)), share_message(pools, "a GPU pod")),
        _validation(ratchet(grace_capped("object", policy)), grace_message(policy, "a GPU pod")),
    ]  # fmt: skip
    if policy.uses_secondary_scheduler:
        out.append(
            _validation(
                GPU_PODS_USE_PACKING_SCHEDULER,
                f"GPU pods must set schedulerName: {SECONDARY_SCHEDULER_NAME}, the scheduler that packs GPUs",
            )
        )
    return out


PRIORITY_NOT_SET = f"!has(object.metadata.labels) || !('{KUEUE_PRIORITY_LABEL}' in object.metadata.labels)"
_TEAM_DEFAULT = f"namespaceObject.metadata.labels['{PRIORITY_LABEL}']"
_HAS_TEAM_DEFAULT = (
    f"has(namespaceObject.metadata.labels) && '{PRIORITY_LABEL}' in namespaceObject.metadata.labels"
)
SET_PRIORITY = (
    "Object{metadata: Object.metadata{labels: "
    f"{_HAS_TEAM_DEFAULT} ? {{'{KUEUE_PRIORITY_LABEL}': {_TEAM_DEFAULT}}} : {{}}}}}}"
)
SCHEDULER_NOT_SET = "!has(object.spec.schedulerName) || object.spec.schedulerName == 'default-scheduler'"
SET_SCHEDULER = f"Object{{spec: Object.spec{{schedulerName: '{SECONDARY_SCHEDULER_NAME}'}}}}"


def mutating_policies(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    if not supports_mutating_policies(policy.kubernetes_version):
        return []
    out = _mutating(DEFAULT_PRIORITY, job_rules(["CREATE"]), PRIORITY_NOT_SET, SET_PRIORITY)
    if policy.uses_secondary_scheduler:
        out += _mutating(
            DEFAULT_SCHEDULER, [_rule("", ["pods"], ["CREATE"])], SCHEDULER_NOT_SET, SET_SCHEDULER
        )
    return out + routing_mutations()


def routing_mutations() -> list[dict[str, Any]]:
    """Per job kind (and bare pods): a CPU-only job naming no queue (or `default`) goes to the `cpu` queue."""
    out: list[dict[str, Any]] = []
    for group, resource in enabled_kinds():
        if (group, resource) in TEMPLATES:
            condition, variables = (
                "variables.templates.all(t, " + no_gpu_request("t") + ")",
                [{"name": "templates", "expression": TEMPLATES[(group, resource)]}],
            )
        elif (group, resource) == ("", "pods"):
            condition, variables = f"!has(object.metadata.ownerReferences) && {no_gpu_request('object')}", []
        else:
            continue
        apply = f"{route_condition(condition)} ? {SET_CPU_QUEUE} : Object{{}}"
        objects = _mutating(
            f"{ROUTE_QUEUE}-{resource}", [_rule(group, [resource], ["CREATE"])], "true", apply
        )
        if variables:
            objects[0]["spec"]["variables"] = variables
        out += objects
    return out


def team_admission(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """Every admission policy and binding for team namespaces (none when there is no team)."""
    if not policy.teams:
        return []
    pods = [_rule("", ["pods", "pods/ephemeralcontainers"], ["CREATE", "UPDATE"])]
    services = [_rule("", ["services"], ["CREATE", "UPDATE"])]
    no_external = _validation(
        NO_EXTERNAL_SERVICE,
        "LoadBalancer and NodePort Services are not allowed in this team namespace (teams[].allowExternalServices)",
    )
    no_ips = _validation(
        NO_EXTERNAL_IPS, "Services in team namespaces may not set externalIPs (CVE-2020-8554)"
    )
    return [
        *_validating(PODS, pods, TEAM_NAMESPACES, pod_validations(policy, pools) + pod_routing()),
        *_validating(SERVICES, services, TEAM_NAMESPACES, [no_external, no_ips]),
        *template_policies(policy, pools),
        *ingress_policy(),
        *disruption_budget_policy(),
        *priority_cap_policy(policy, job_rules(["CREATE", "UPDATE"])),
        *ownership_policy(policy),
        *refused_kinds_policy(policy),
        *job_start_policies(policy),
        *kueue_gap_policies(policy),
        *grace_policy(policy),
        *mutating_policies(policy),
    ]
