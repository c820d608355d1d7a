"""GPU bin-packing: a NodeResourcesFit scoring profile, and a secondary kube-scheduler running it where needed.

On EKS `infra` hands `kube_scheduler_config()` to the managed control plane. On an existing cluster the control
plane is not ours, so the same profile runs as an upstream kube-scheduler (`schedulerName: gpu-binpack`,
image matching the cluster's minor) with its own RBAC and leader-election lease: two replicas, on two nodes
wherever two untainted nodes can take them (one holds the lease), a PodDisruptionBudget so a drain never
takes both, system-cluster-critical priority and a memory limit. Team pods get its name from an admission policy (scheduler.admission), so GPU
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
    HOSTNAME_LABEL,
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
PERCENTAGE_OF_NODES_TO_SCORE = 100  # every feasible node (scheduler_config_file)


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
    """The gpu-binpack scheduler's KubeSchedulerConfiguration: the placement profile scoring every feasible node.

    Without ``percentageOfNodesToScore`` kube-scheduler stops filtering once it has found
    ``max(100, n * max(5, 50 - n/125) / 100)`` feasible nodes of ``n`` (kubernetes v1.35.8
    pkg/scheduler/schedule_one.go ``numFeasibleNodesToFind``, ``minFeasibleNodesToFind = 100``): above 100 nodes
    the profile and the extender would score a window that rotates from pod to pod (144 of 300 nodes, 420 of
    1,000), so the best-packed or least-fragmenting node is often never seen. At 100 every feasible node is
    scored; GPU pods are few, and filtering, not scoring, is most of a cycle's work. The profile-level field
    (kube-scheduler config/v1 ``KubeSchedulerProfile.PercentageOfNodesToScore``, 0-100) overrides the global one.
    """
    config = kube_scheduler_config(policy, pools, SECONDARY_SCHEDULER_NAME)
    for profile in config["profiles"]:
        profile["percentageOfNodesToScore"] = PERCENTAGE_OF_NODES_TO_SCORE
    config["leaderElection"] = {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": SECONDARY_SCHEDULER_NAME,
        "resourceNamespace": SCHEDULER_NAMESPACE,
    }
    return config


def _spread() -> list[dict[str, Any]]:
    """One replica per node while two nodes can take them; both on one node when only one can.

    Required host anti-affinity would break on the clusters this scheduler runs on, whose GPU hosts are
    tainted and leave few untainted nodes: with one such node the second replica is Pending for good, and with
    exactly two a rolling update never starts, because the Deployment's default strategy (maxSurge 1,
    maxUnavailable 0 for 2 replicas; kubernetes.io "Deployments") needs a third node for its surge pod. Preferred anti-affinity is only one score among others, so two nodes
    would not guarantee two hosts.

    A hard spread over host names does both (kubernetes.io "Pod Topology Spread Constraints"): a replica may not
    go where its node would hold two more replicas than another node (``maxSkew: 1``, ``DoNotSchedule``),
    counting only the nodes whose NoSchedule/NoExecute taints it tolerates (``nodeTaintsPolicy: Honor``; GA and
    locked on since 1.33) and only the replicas of its own revision (``matchLabelKeys: [pod-template-hash]``;
    beta, on by default since 1.27). So two untainted nodes get one replica each, also after a rolling update
    (the new revision spreads by itself, and its surge pod may join an old replica's node); one untainted node
    gets both; tainted GPU hosts and cordoned nodes (the node lifecycle controller taints them
    ``node.kubernetes.io/unschedulable:NoSchedule``) are no domains at all, where under the default ``Ignore``
    each would count as a node without a replica and forbid a second one on the single untainted node.
    Sources: kubernetes v1.35.8 pkg/scheduler/framework/plugins/podtopologyspread (common.go
    ``matchNodeInclusionPolicies``, filtering.go), pkg/features/kube_features.go; tests/twin/
    test_platform_placement.py runs all three cases on the real scheduler and controllers.
    """
    return [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_LABEL,
            "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor",
            "labelSelector": {"matchLabels": dict(APP)},
            "matchLabelKeys": ["pod-template-hash"],
        }
    ]


def _budget() -> dict[str, Any]:
    """At most one replica evicted at a time (``maxUnavailable: 1``); a replica that is not Ready, always.

    For two replicas this admits exactly what ``minAvailable: 1`` did: the disruption controller wants
    ``scale - maxUnavailable`` = 1 healthy pod (kubernetes v1.35.8 pkg/controller/disruption/disruption.go
    ``getExpectedPodCount``). It is taken from the Deployment's scale rather than fixed, so the budget stays
    "one at a time" at any replica count, and a one-replica scheduler (a one-node cluster's owner scaling it
    down) does not block a drain for ever. A pod that is not Ready is evicted regardless of the budget
    (``unhealthyPodEvictionPolicy: AlwaysAllow``, GA in 1.31; pkg/registry/core/pod/storage/eviction.go), so a
    replica still waiting for its extender's lists never holds a drain up; the two settings are independent.
    When both replicas share the only untainted node, draining it evicts one and then waits: its replacement
    has nowhere to start, and the budget does not let the drain stop GPU scheduling silently. Preflight reports
    such clusters (infra.preflight.scheduling ``check_platform_nodes``).
    """
    return {
        "maxUnavailable": 1,
        "selector": {"matchLabels": dict(APP)},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }


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
    pod = {
        "serviceAccountName": SECONDARY_SCHEDULER_NAME,
        "priorityClassName": PRIORITY_CLASS,
        "topologySpreadConstraints": _spread(),
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
        "spec": _budget(),
    }
    return [ns, *_rbac(), config, _deployment(policy), pdb]


# ---- FragmentationAware: the scheduler extender (scheduler/extender) ------------------------------------

EXTENDER_WEIGHT = (
    100  # x 10 per point (score * weight * 100/10): outweighs NodeResourcesFit's 0..100 x its weight
)
EXTENDER_TIMEOUT = "2s"  # a 10,000-node prioritize answers well within it (benchmarks/extender_bench.py)


def extender_entry(url: str, managed_resources: Sequence[str]) -> dict[str, Any]:
    """One ``extenders[]`` entry of a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1 ``Extender``).

    ``ignorable: true``: when the extender is down, kube-scheduler skips it for filter and prioritize
    (pkg/scheduler/schedule_one.go) and the profile's own NodeResourcesFit (MostAllocated) places the pod, so
    GPU pods keep scheduling, packed, only not fragmentation-aware.
    ``nodeCacheCapable: true``: the extender watches nodes itself, so the scheduler sends names only.
    No ``bindVerb``: the scheduler binds every pod with its DefaultBinder, after its cache has assumed the pod,
    so no Binding of the extender's can arrive late and race a second one (kubernetes v1.35.8
    ``schedule_one.go``, ``extendersBinding`` -> ``handleBindingCycleError`` -> ``Cache.ForgetPod``, which
    would count the pod's GPUs free until the informer sees it bound); the extender learns the placement from
    its own verbs and its watch (:mod:`scheduler.extender.view`).
    """
    return {
        "urlPrefix": url,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
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
