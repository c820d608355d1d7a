"""Admission policies for team namespaces: what a team's pods and Services may ask for, and defaults they get.

Validating (admissionregistration.k8s.io/v1, every supported Kubernetes version), in namespaces labelled
`gpufleet.io/queue-managed=true` and nowhere else (the platform's namespaces are never matched):
- no container sets `NVIDIA_VISIBLE_DEVICES` (with the envvar device-list strategy, or a toolkit that accepts
  the variable from unprivileged containers, it would expose every GPU of the node);
- a pod that tolerates the GPU taint requests a GPU resource, unless Kueue's topology-aware scheduling places it
  (a job controller's pod with Kueue's `kueue.x-k8s.io/topology` gate and without its admission gate); an
  update may add such a toleration only as Kueue's own ServiceAccount;
- only Kueue's ServiceAccount removes Kueue's scheduling gates, and no pod is created with `spec.nodeName`
  (both would let a pod skip the queue);
- a container requests at most one time-sliced GPU (`nvidia.com/gpu.shared`);
- no pod uses the `system-node-critical` / `system-cluster-critical` PriorityClasses (any namespace may by
  default, and kube-scheduler would preempt other teams' pods for them);
- where the secondary scheduler binds GPU pods (`existing` clusters, and every platform with
  `placement.strategy: FragmentationAware`), a GPU pod names it (`schedulerName: gpu-binpack`), so GPUs are
  only ever bound by one scheduler;
- no Service of type LoadBalancer or NodePort, unless the team's `allowExternalServices` is set (its namespace
  then carries `gpufleet.io/external-services=allowed`, which the policy reads), and no `externalIPs` at all.

What these decide is tested on the real API server with Kueue's real webhooks (tests/twin).

Mutating (admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, GA and served by default from Kubernetes
1.36; before that the API is beta and off by default, so nothing is rendered and the docs say what to do):
- a job (every Kueue integration's kind) without `kueue.x-k8s.io/priority-class` gets the team's default
  WorkloadPriorityClass, read from its namespace's `gpufleet.io/default-priority` label;
- where the secondary scheduler binds GPU pods, a pod that leaves `schedulerName` at its default gets
  `gpu-binpack`.
"""

from __future__ import annotations

from typing import Any

from scheduler.kueue_config import FRAMEWORKS
from scheduler.labels import (
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    KUEUE_NAMESPACE,
    SECONDARY_SCHEDULER_NAME,
    SHARED_GPU_RESOURCE,
)
from scheduler.model import SchedulingPolicy
from scheduler.podcel import containers as _containers
from scheduler.podcel import no_gpu_request as _no_gpu_request
from scheduler.podcel import tolerates_gpu_taint as _tolerates_gpu_taint
from scheduler.queue_routing import ROUTE_QUEUE, SET_CPU_QUEUE, pod_routing, route_condition, template_routing
from scheduler.tenancy import (
    EXTERNAL_ALLOWED,
    KUEUE_PRIORITY_LABEL,
    PRIORITY_LABEL,
    disruption_budget_policy,
    ingress_policy,
    priority_cap_policy,
)
from scheduler.vap import TEAM_NAMESPACES
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
KUEUE_SERVICE_ACCOUNT = "kueue-controller-manager"  # the chart's `<release>-controller-manager`
SYSTEM_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
MUTATING_ADMISSION_POLICY_SINCE = (1, 36)  # admissionregistration.k8s.io/v1, on by default

# Kueue integration (framework name) -> (API group, resource) its jobs are created as.
FRAMEWORK_RESOURCES = {
    "batch/job": ("batch", "jobs"),
    "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets"),
    "kubeflow.org/mpijob": ("kubeflow.org", "mpijobs"),
    "kubeflow.org/pytorchjob": ("kubeflow.org", "pytorchjobs"),
    "trainer.kubeflow.org/trainjob": ("trainer.kubeflow.org", "trainjobs"),
    "ray.io/rayjob": ("ray.io", "rayjobs"),
    "ray.io/raycluster": ("ray.io", "rayclusters"),
    "leaderworkerset.x-k8s.io/leaderworkerset": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    "pod": ("", "pods"),
    "deployment": ("apps", "deployments"),
    "statefulset": ("apps", "statefulsets"),
}


NO_VISIBLE_DEVICES = _containers("object", f"!has(c.env) || c.env.all(e, e.name != '{VISIBLE_DEVICES}')")
KUEUE_USER = f"system:serviceaccount:{KUEUE_NAMESPACE}:{KUEUE_SERVICE_ACCOUNT}"
BY_KUEUE = f"request.userInfo.username == '{KUEUE_USER}'"


def _gated(var: str, gate: str) -> str:
    return f"(has({var}.spec.schedulingGates) && {var}.spec.schedulingGates.exists(g, g.name == '{gate}'))"


# A pod Kueue places with topology-aware scheduling for a job integration: created by its job's controller
# (a controller ownerReference) from the template Kueue wrote when it admitted the job, with the topology gate
# and without the admission gate. Kueue's pod webhook adds the topology gate to *every* pod it manages (bare,
# Deployment, StatefulSet pods) while TAS is on, but those also carry the admission gate until Kueue admits
# them (kueue v0.19.2 pkg/controller/jobs/pod/pod_webhook.go), so the gate alone proves nothing.
PLACED_BY_KUEUE_TAS = (
    f"({_gated('object', TOPOLOGY_GATE)} && !{_gated('object', ADMISSION_GATE)} && "
    "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, has(o.controller) && o.controller))"
)
GPU_TOLERATION_NEEDS_GPU = (
    f"!{_tolerates_gpu_taint('object')} || !({_no_gpu_request('object')}) || "
    f"(request.operation == 'CREATE' && {PLACED_BY_KUEUE_TAS}) || "
    f"(request.operation != 'CREATE' && ({_tolerates_gpu_taint('oldObject')} || {BY_KUEUE}))"
)
# Only Kueue lifts its gates: it does when it admits the pod's workload. Kueue's own webhook does not check
# gates on update (pod_webhook.go ValidateUpdate), so without this a member ungates their own pod and skips
# the queue.
KEEPS_KUEUE_GATES = f"request.operation == 'CREATE' || {BY_KUEUE} || " + " && ".join(
    f"(!{_gated('oldObject', g)} || {_gated('object', g)})" for g in (ADMISSION_GATE, TOPOLOGY_GATE)
)
# Binding is the scheduler's (pods/binding); a pod created with spec.nodeName skips it, and with it the
# queue's placement and every NoSchedule taint (the kubelet checks only NoExecute taints,
# kubernetes pkg/kubelet/lifecycle/predicate.go).
NO_NODE_NAME = "request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''"
# Time-sliced GPUs: the device plugin refuses more than one replica per container (failRequestsGreaterThanOne,
# scheduler.sharing), but only on the node, after Kueue admitted the job; refuse it up front instead. Extended
# resources are whole numbers, written by the API server as plain integer strings.
AT_MOST_ONE_SHARED = _containers(
    "object",
    " && ".join(
        f"(!has(c.resources) || !has(c.resources.{kind}) || !('{SHARED_GPU_RESOURCE}' in c.resources.{kind}) "
        f"|| string(c.resources.{kind}['{SHARED_GPU_RESOURCE}']) in ['0', '1'])"
        for kind in ("requests", "limits")
    ),
)
NO_SYSTEM_PRIORITY = (
    "!has(object.spec.priorityClassName) || "
    f"!(object.spec.priorityClassName in {list(SYSTEM_PRIORITY_CLASSES)!r})"
)
GPU_PODS_USE_PACKING_SCHEDULER = (
    f"request.operation != 'CREATE' || ({_no_gpu_request('object')}) || "
    f"(has(object.spec.schedulerName) && object.spec.schedulerName == '{SECONDARY_SCHEDULER_NAME}')"
)
NO_EXTERNAL_SERVICE = (
    f"{EXTERNAL_ALLOWED} || !has(object.spec.type) || !(object.spec.type in ['LoadBalancer', 'NodePort'])"
)
# A Service's externalIPs make kube-proxy capture that address for every pod and node of the cluster
# (CVE-2020-8554, kubernetes/kubernetes#97076, no fix upstream): refused for every team.
NO_EXTERNAL_IPS = "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0"


# ---- the same rules on the pod templates of every job kind Kueue integrates ----------------------------------
# A Job (JobSet, PyTorchJob, RayJob, Deployment...) whose template breaks a pod rule would be admitted by Kueue
# and hold the team's quota while its controller's pod creations are refused, until waitForPodsReady evicts it,
# requeued forever. So the job is refused when it is created.

# Kind (group, resource) -> CEL list of the PodTemplateSpecs in its object (each with `.spec`).
TEMPLATES: dict[tuple[str, str], str] = {
    ("batch", "jobs"): "[object.spec.template]",
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
TEMPLATE_POLICY = "gpufleet-team-pod-templates"
# Kueue writes the admitted flavor's node selector and tolerations into a job's template when it starts it;
# that update is Kueue's, and the toleration rule is the user's to obey at creation.
BY_USER = f"request.userInfo.username != '{KUEUE_USER}'"


def _template_checks(var: str) -> dict[str, str]:
    tolerates = _tolerates_gpu_taint(var)
    return {
        "visible": _containers(var, f"!has(c.env) || c.env.all(e, e.name != '{VISIBLE_DEVICES}')"),
        "shared": AT_MOST_ONE_SHARED.replace("object.", f"{var}."),
        "priority": (
            f"!has({var}.spec.priorityClassName) || !({var}.spec.priorityClassName in {list(SYSTEM_PRIORITY_CLASSES)!r})"
        ),
        "node": f"!has({var}.spec.nodeName) || {var}.spec.nodeName == ''",
        "toleration": f"!{tolerates} || !({_no_gpu_request(var)})",
        "scheduler": (
            f"({_no_gpu_request(var)}) || (has({var}.spec.schedulerName) && {var}.spec.schedulerName == "
            f"'{SECONDARY_SCHEDULER_NAME}')"
        ),
    }


def template_validations(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    """The pod rules, on every template of the job (`variables.templates`)."""
    checks = _template_checks("t")
    every = {name: f"variables.templates.all(t, {expr})" for name, expr in checks.items()}
    for kept in ("visible", "shared", "priority"):  # ratcheted as the pod rules are (see ratchet)
        every[kept] = (
            f"(request.operation == 'UPDATE' && !(variables.oldTemplates.all(t, {checks[kept]}))) || {every[kept]}"
        )
    out = [
        _validation(every["visible"], f"a pod template in a team namespace sets {VISIBLE_DEVICES}; request a GPU resource instead"),
        _validation(every["shared"], f"a pod template asks more than one {SHARED_GPU_RESOURCE} in a container (one time-sliced replica at most)"),
        _validation(every["priority"], f"a pod template uses the {' or '.join(SYSTEM_PRIORITY_CLASSES)} PriorityClass"),
        _validation(every["node"], "a pod template sets spec.nodeName: the scheduler binds pods after Kueue admits the job"),
        _validation(f"!({BY_USER}) || {every['toleration']}",
                    f"a pod template tolerates the {GPU_TAINT_KEY}={GPU_TAINT_VALUE} taint without a GPU request; "
                    "Kueue adds the toleration when it admits a GPU job"),
    ]  # fmt: skip
    if policy.uses_secondary_scheduler and not supports_mutating_policies(policy.kubernetes_version):
        out.append(
            _validation(
                every["scheduler"],
                f"a pod template requests GPUs without schedulerName: {SECONDARY_SCHEDULER_NAME}, the scheduler that "
                "packs GPUs (on this Kubernetes minor nothing fills it in); its pods would be refused after Kueue "
                "admitted the job",
            )
        )
    return out


def template_policies(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    """One policy per job kind (its templates' CEL path differs), all bound with Deny."""
    out: list[dict[str, Any]] = []
    validations = template_validations(policy) + template_routing()
    for framework in FRAMEWORKS:
        key = FRAMEWORK_RESOURCES[framework]
        if key not in TEMPLATES:
            continue
        group, resource = key
        name = f"{TEMPLATE_POLICY}-{resource}"
        objects = _validating(
            name, [_rule(group, [resource], ["CREATE", "UPDATE"])], TEAM_NAMESPACES, validations
        )
        old = TEMPLATES[key].replace("object.", "oldObject.")
        objects[0]["spec"]["variables"] = [
            {"name": "templates", "expression": TEMPLATES[key]},
            {"name": "oldTemplates", "expression": f"request.operation == 'UPDATE' ? ({old}) : []"},
        ]
        out += objects
    return out


def ratchet(expression: str) -> str:
    """The rule on CREATE; on UPDATE only where the old object kept it: a pod that broke it before the policy
    existed (or before its namespace was team-managed) can still be updated, so Kueue can ungate it and remove
    its finalizer (a validation runs on every matched operation, kubernetes.io
    "Validating Admission Policy"). Pod specs are immutable but for a few fields, so no update makes it worse."""
    old = expression.replace("object.", "oldObject.")
    return f"(request.operation == 'UPDATE' && !({old})) || ({expression})"


def pod_validations(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    out = [
        _validation(
            ratchet(NO_VISIBLE_DEVICES),
            f"containers in team namespaces may not set {VISIBLE_DEVICES}; request a GPU resource instead",
        ),
        _validation(
            GPU_TOLERATION_NEEDS_GPU,
            f"a pod that tolerates the {GPU_TAINT_KEY}={GPU_TAINT_VALUE} taint must request a GPU resource; "
            "Kueue adds the toleration when it admits a GPU job",
        ),
        _validation(
            KEEPS_KUEUE_GATES,
            "only Kueue removes its scheduling gates (kueue.x-k8s.io/admission, kueue.x-k8s.io/topology), "
            "when it admits the pod's workload",
        ),
        _validation(
            NO_NODE_NAME,
            "team pods may not set spec.nodeName: the scheduler binds them after Kueue admits their workload",
        ),
        _validation(
            ratchet(AT_MOST_ONE_SHARED),
            f"a container may request at most one {SHARED_GPU_RESOURCE} (one time-sliced replica)",
        ),
        _validation(
            ratchet(NO_SYSTEM_PRIORITY),
            f"team pods may not use the {' or '.join(SYSTEM_PRIORITY_CLASSES)} PriorityClass",
        ),
    ]
    if policy.uses_secondary_scheduler:
        out.append(
            _validation(
                GPU_PODS_USE_PACKING_SCHEDULER,
                f"GPU pods must set schedulerName: {SECONDARY_SCHEDULER_NAME}, the scheduler that packs GPUs",
            )
        )
    return out


def supports_mutating_policies(kubernetes_version: str) -> bool:
    """MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1, served by default) from 1.36 on."""
    major, minor = (int(x) for x in kubernetes_version.split(".")[:2])
    return (major, minor) >= MUTATING_ADMISSION_POLICY_SINCE


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
    for framework in FRAMEWORKS:
        group, resource = FRAMEWORK_RESOURCES[framework]
        if (group, resource) in TEMPLATES:
            condition, variables = (
                "variables.templates.all(t, " + _no_gpu_request("t") + ")",
                [{"name": "templates", "expression": TEMPLATES[(group, resource)]}],
            )
        elif (group, resource) == ("", "pods"):
            condition, variables = f"!has(object.metadata.ownerReferences) && {_no_gpu_request('object')}", []
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


def team_admission(policy: SchedulingPolicy) -> list[dict[str, Any]]:
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
        *_validating(PODS, pods, TEAM_NAMESPACES, pod_validations(policy) + pod_routing()),
        *_validating(SERVICES, services, TEAM_NAMESPACES, [no_external, no_ips]),
        *template_policies(policy),
        *ingress_policy(),
        *disruption_budget_policy(),
        *priority_cap_policy(policy, job_rules(["CREATE", "UPDATE"])),
        *mutating_policies(policy),
    ]


def job_rules(operations: list[str]) -> list[dict[str, Any]]:
    """Rules matching every Kueue integration's job kind, one per API group."""
    by_group: dict[str, list[str]] = {}
    for framework in FRAMEWORKS:
        group, resource = FRAMEWORK_RESOURCES[framework]
        by_group.setdefault(group, []).append(resource)
    return [_rule(group, resources, operations) for group, resources in by_group.items()]
