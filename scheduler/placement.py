"""GPU bin-packing: a NodeResourcesFit scoring profile, and a secondary kube-scheduler running it where needed.

On EKS `infra` hands `kube_scheduler_config()` to the managed control plane. On an existing cluster the control
plane is not ours, so the same profile runs as an upstream kube-scheduler (`schedulerName: gpu-binpack`,
image matching the cluster's minor) with its own RBAC and leader-election lease: two replicas on different
nodes (one holds the lease), a PodDisruptionBudget so a drain never takes both, system-cluster-critical
priority and a memory limit. Team pods get its name from an admission policy (scheduler.admission), so GPU
pods are bound by this one scheduler only. With `placement.strategy: FragmentationAware` the secondary
scheduler runs on EKS too (the managed control plane takes no extenders) and its configuration calls the
extender (scheduler.extender.manifests.fragmentation_aware).

`scheduler_config_file` is the one function that builds the secondary scheduler's configuration (its name
and its profile); everything else refers to SECONDARY_SCHEDULER_NAME.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.labels import (
    GPU_RESOURCE,
    SCHEDULER_NAMESPACE,
    SECONDARY_SCHEDULER_NAME,
    metadata,
    restricted_security_context,
)
from scheduler.model import PoolView, SchedulingPolicy, fit_strategy
from scheduler.resources import covered_gpu_resources
from scheduler.yamltext import dump_text

SCHEDULER_API = "kubescheduler.config.k8s.io/v1"
IMAGE = "registry.k8s.io/kube-scheduler"
CONFIG_DIR = "/etc/kubernetes/gpu-binpack"
CONFIG_FILE = "config.yaml"
PRIORITY_CLASS = "system-cluster-critical"  # with the default scheduler down, it must be the last to go
RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
APP = {"app.kubernetes.io/name": SECONDARY_SCHEDULER_NAME}


def scoring_resources(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """The configured weights; shared and MIG GPU resources get the whole-GPU weight."""
    weights = dict(policy.placement_weights)
    gpu_weight = weights.get(GPU_RESOURCE, 10)
    for name in covered_gpu_resources(pools):
        weights.setdefault(name, gpu_weight)
    return [{"name": name, "weight": weight} for name, weight in weights.items()]


def kube_scheduler_config(
    policy: SchedulingPolicy, pools: Sequence[PoolView], scheduler_name: str = "default-scheduler"
) -> dict[str, Any]:
    """A KubeSchedulerConfiguration whose profile scores nodes by `placement_strategy` (GPU-weighted);
    FragmentationAware scores by MostAllocated here and adds the extender (:func:`with_extender`)."""
    args = {
        "scoringStrategy": {
            "type": fit_strategy(policy.placement_strategy),
            "resources": scoring_resources(policy, pools),
        }
    }
    return {
        "apiVersion": SCHEDULER_API,
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {"schedulerName": scheduler_name, "pluginConfig": [{"name": "NodeResourcesFit", "args": args}]}
        ],
    }


def _meta(name: str, namespace: str | None = SCHEDULER_NAMESPACE) -> dict[str, Any]:
    return metadata(name, namespace, APP)


def _binding(kind: str, name: str, role_kind: str, role: str, namespace: str | None) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [
            {"kind": "ServiceAccount", "name": SECONDARY_SCHEDULER_NAME, "namespace": SCHEDULER_NAMESPACE}
        ],
    }


def _rbac() -> list[dict[str, Any]]:
    name = SECONDARY_SCHEDULER_NAME
    lease_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(f"{name}-leader-election"),
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [name],
             "verbs": ["get", "update"]},
        ],
    }  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name)},
        _binding("ClusterRoleBinding", f"{name}-kube-scheduler", "ClusterRole", "system:kube-scheduler", None),
        _binding("ClusterRoleBinding", f"{name}-volume-scheduler", "ClusterRole", "system:volume-scheduler", None),
        # Reads the client-CA ConfigMap in kube-system to authenticate requests to its secure port.
        _binding("RoleBinding", f"{name}-auth-reader", "Role", "extension-apiserver-authentication-reader",
                 "kube-system"),
        lease_role,
        _binding("RoleBinding", f"{name}-leader-election", "Role", f"{name}-leader-election", SCHEDULER_NAMESPACE),
    ]  # fmt: skip


def scheduler_config_file(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> dict[str, Any]:
    config = kube_scheduler_config(policy, pools, SECONDARY_SCHEDULER_NAME)
    config["leaderElection"] = {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": SECONDARY_SCHEDULER_NAME,
        "resourceNamespace": SCHEDULER_NAMESPACE,
    }
    return config


def _deployment(policy: SchedulingPolicy) -> dict[str, Any]:
    def http_get() -> dict[str, Any]:
        return {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}

    probe = {"httpGet": http_get(), "initialDelaySeconds": 15}
    container = {
        "name": "kube-scheduler",
        "image": f"{IMAGE}:{policy.kube_scheduler_image_tag}",
        "command": ["/usr/local/bin/kube-scheduler", f"--config={CONFIG_DIR}/{CONFIG_FILE}", "--v=2"],
        "livenessProbe": probe,
        "readinessProbe": {"httpGet": http_get()},
        "resources": {k: dict(v) for k, v in RESOURCES.items()},
        "securityContext": restricted_security_context(),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    spread = {
        "labelSelector": {"matchLabels": dict(APP)},
        "topologyKey": "kubernetes.io/hostname",
    }
    pod = {
        "serviceAccountName": SECONDARY_SCHEDULER_NAME,
        "priorityClassName": PRIORITY_CLASS,
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [spread]}},
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": f"{SECONDARY_SCHEDULER_NAME}-config"}}],
    }
    spec = {
        "replicas": 2,  # one active (lease holder), one standby
        "selector": {"matchLabels": dict(APP)},
        "template": {"metadata": {"labels": dict(APP)}, "spec": pod},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(SECONDARY_SCHEDULER_NAME),
        "spec": spec,
    }


def secondary_scheduler(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(SCHEDULER_NAMESPACE, labels={"pod-security.kubernetes.io/enforce": "restricted"}),
    }  # fmt: skip
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(f"{SECONDARY_SCHEDULER_NAME}-config"),
        "data": {CONFIG_FILE: dump_text(scheduler_config_file(policy, pools))},
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(SECONDARY_SCHEDULER_NAME),
        # A replica that is not Ready (its extender still listing, say) may always be evicted, so a drain never
        # waits on it (kubernetes.io "Specifying a Disruption Budget", unhealthyPodEvictionPolicy; GA in 1.31).
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": dict(APP)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
    return [ns, *_rbac(), config, _deployment(policy), pdb]


# ---- FragmentationAware: the scheduler extender (scheduler/extender) ------------------------------------

EXTENDER_WEIGHT = (
    100  # x 10 per point (score * weight * 100/10): outweighs NodeResourcesFit's 0..100 x its weight
)
EXTENDER_TIMEOUT = "2s"  # a 10,000-node prioritize answers well within it (benchmarks/extender_bench.py)


def extender_entry(url: str, managed_resources: Sequence[str]) -> dict[str, Any]:
    """One ``extenders[]`` entry of a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1 ``Extender``).

    ``ignorable: true``: when the extender is down, kube-scheduler skips it for filter, prioritize and bind
    (pkg/scheduler/schedule_one.go) and the profile's own NodeResourcesFit (MostAllocated) places the pod and
    the default binder binds it, so GPU pods keep scheduling, packed, only not fragmentation-aware.
    ``nodeCacheCapable: true``: the extender watches nodes itself, so the scheduler sends names only.
    """
    return {
        "urlPrefix": url,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": EXTENDER_WEIGHT,
        "enableHTTPS": False,
        "httpTimeout": EXTENDER_TIMEOUT,
        "nodeCacheCapable": True,
        "managedResources": [{"name": name, "ignoredByScheduler": False} for name in managed_resources],
        "ignorable": True,
    }


def with_extender(config: dict[str, Any], url: str, managed_resources: Sequence[str]) -> dict[str, Any]:
    """``config`` (a KubeSchedulerConfiguration, e.g. :func:`scheduler_config_file`'s) with the extender added.

    ``extenders`` is top-level and shared by all profiles; managedResources limit it to GPU pods.
    """
    out = dict(config)
    out["extenders"] = [*config.get("extenders", []), extender_entry(url, managed_resources)]
    return out
