"""policy + pools -> every Kubernetes object the scheduling layer needs, in apply order. Pure: no I/O, no pulumi.

Apply order (reverse to delete): namespaces, identities and RBAC, configuration, workloads, then Kueue's
custom resources with referenced objects before the objects that reference them (priority classes and flavors,
admission checks, the cohort, cluster queues, local queues).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.admission import team_admission
from scheduler.autoscaling import priority_expander
from scheduler.checks import check
from scheduler.dra import share_objects, share_pools
from scheduler.extender.manifests import fragmentation_aware, modelled_pools
from scheduler.guard import gpu_guard
from scheduler.kueue import kueue_objects
from scheduler.model import PoolView, SchedulingPolicy
from scheduler.namespaces import team_objects
from scheduler.placement import secondary_scheduler
from scheduler.resources import covered_gpu_resources
from scheduler.sharing import device_plugin_configmap

KIND_ORDER = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "ResourceQuota",
    "LimitRange",
    "Deployment",
    "WorkloadPriorityClass",
    "Topology",
    "ResourceFlavor",
    "ProvisioningRequestConfig",
    "AdmissionCheck",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "ValidatingAdmissionPolicy",  # block bypassing pods once the queues that admit them exist
    "ValidatingAdmissionPolicyBinding",
    # Kinds added later go last, so the rank prefixes of rendered files (and GitOps paths) never change.
    "NetworkPolicy",
    "PodDisruptionBudget",
    "MutatingAdmissionPolicy",  # defaults for team jobs, once the priority classes they name exist
    "MutatingAdmissionPolicyBinding",
    "Service",  # the fragmentation-aware extender's
    "DeviceClass",  # GPU shares through DRA (scheduler.dra)
    "ResourceClaimTemplate",
)
KUEUE_GROUP = "kueue.x-k8s.io"
# Namespaced objects may live in these without creating them: they belong to the cluster or to infra's releases.
EXTERNAL_NAMESPACES = frozenset({"kube-system", "gpu-operator"})


def is_custom_resource(obj: dict[str, Any]) -> bool:
    """Kueue objects: they need Kueue's CRDs (and its webhooks) before they can be applied."""
    return obj["apiVersion"].split("/")[0] == KUEUE_GROUP


def apply_key(obj: dict[str, Any]) -> tuple[int, str, str]:
    meta = obj["metadata"]
    return KIND_ORDER.index(obj["kind"]), meta.get("namespace", ""), meta["name"]


def listing_key(obj: dict[str, Any]) -> tuple[int, str]:
    """Apply order, ties broken as a listing of the rendered files sorts (`<rank>-<kind>-[<ns>-]<name>.yaml`),
    so `batch-topology` comes before `batch` in both."""
    rank, namespace, name = apply_key(obj)
    return rank, f"{namespace}-{name}." if namespace else f"{name}."


def secondary_scheduler_objects(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """The secondary scheduler; with FragmentationAware, its configuration calls the extender, deployed beside
    it, for the GPU resources the pools expose."""
    objects = secondary_scheduler(policy, pools)
    if policy.placement_strategy != "FragmentationAware":
        return objects
    return fragmentation_aware(
        objects,
        covered_gpu_resources(pools),
        policy.extender_image,
        modelled_pools(pools),
        shadow=policy.extender_shadow,
        dra_shares=bool(share_pools(pools)),
        metrics=policy.metrics,
    )


def compile(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """Check the inputs (SchedulerConfigError naming the key) and build every object, sorted for applying."""
    pools = tuple(pools)
    check(policy, pools)
    objects: list[dict[str, Any]] = []
    objects += team_objects(policy, pools)
    objects.append(device_plugin_configmap(pools))
    objects += priority_expander(policy, pools)
    if policy.uses_secondary_scheduler:
        objects += secondary_scheduler_objects(policy, pools)
    objects += kueue_objects(policy, pools)
    objects += gpu_guard()
    objects += team_admission(policy, pools)
    objects += share_objects(policy, pools)
    return sorted(objects, key=listing_key)
