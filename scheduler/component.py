"""GpuScheduling: installs Kueue (pinned Helm release) and applies the compiled objects in a safe order.

The only scheduler module that imports pulumi. The ordering rules live in `dependency_plan` (pure, tested on
its own); the component just creates one resource per object with those dependencies:
- Kueue's custom resources wait for the Kueue release (its CRDs and admission webhooks must be serving);
- a namespaced object waits for its Namespace, and for the lower-ranked objects in the same namespace
  (a Deployment starts only after its ServiceAccount, RBAC, including cluster-wide bindings, and ConfigMap);
- cluster-scoped Kueue objects wait for lower-ranked ones (flavors and the cohort before cluster queues).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release
from pulumi_kubernetes.yaml.v2 import ConfigFile, ConfigGroup

from scheduler.compiler import apply_key, compile, is_custom_resource
from scheduler.kueue import as_stored
from scheduler.kueue_config import RELEASE_NAME, kueue_values
from scheduler.labels import KUEUE_NAMESPACE
from scheduler.model import PoolView, SchedulingPolicy

KUEUE_CHART_REPOSITORY = "oci://registry.k8s.io/kueue/charts"
RELEASE = "<kueue-release>"  # marker for the Kueue release in a dependency plan
CLUSTER_RBAC = ("clusterrole-", "clusterrolebinding-")


def object_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    scope = f"{meta['namespace']}-" if meta.get("namespace") else ""
    return f"{obj['kind'].lower()}-{scope}{meta['name']}"


def dependency_plan(objects: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], list[str]]]:
    """(object, keys it must wait for) in apply order; RELEASE stands for the Kueue Helm release."""
    plan: list[tuple[dict[str, Any], list[str]]] = []
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    earlier: dict[str, list[tuple[int, str, bool]]] = {}  # scope -> (rank, key, is custom) already planned
    for obj in sorted(objects, key=apply_key):
        rank, namespace, _ = apply_key(obj)
        deps: list[str] = []
        if is_custom_resource(obj):
            deps.append(RELEASE)
        if namespace in namespaces:
            deps.append(f"namespace-{namespace}")
        if namespace or is_custom_resource(obj):
            deps += [
                key
                for r, key, custom in earlier.get(namespace, [])
                if r < rank and key not in deps and (custom or namespace)
            ]
        if obj["kind"] == "Deployment":  # its pods need their cluster-wide RBAC too
            deps += [key for _, key, _ in earlier.get("", []) if key.startswith(CLUSTER_RBAC)]
        plan.append((obj, deps))
        earlier.setdefault(namespace, []).append((rank, object_key(obj), is_custom_resource(obj)))
    return plan


def sdk_lacks(obj: dict[str, Any]) -> bool:
    """A built-in kind newer than the pinned pulumi-kubernetes SDK's schema (MutatingAdmissionPolicy v1 on
    1.36 with SDK 4.25, whose schema is Kubernetes 1.33): the provider applies it, but a ConfigGroup's result
    names a type the SDK cannot construct ("unknown resource type", pulumi_kubernetes/_utilities.py), so such
    objects are applied as generic resources (`apiextensions.CustomResource`, any apiVersion and kind)."""
    import importlib

    group, _, version = obj["apiVersion"].rpartition("/")
    package = (group.split(".")[0] if group else "core") + f".{version}"
    try:
        module = importlib.import_module(f"pulumi_kubernetes.{package}")
    except ImportError:
        return False  # a custom resource's group: the SDK handles those generically
    return not hasattr(module, obj["kind"])


def apply_object(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """One object: a ConfigGroup (typed by the SDK), or a generic resource where the SDK lacks its kind."""
    if sdk_lacks(obj):
        from pulumi_kubernetes.apiextensions import CustomResource

        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        return CustomResource(
            name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], opts=opts, **body
        )
    return ConfigGroup(name, objs=[obj], opts=opts)


class GpuScheduling(pulumi.ComponentResource):
    """Kueue plus every object `scheduler.compile(policy, pools)` produces, applied in dependency order."""

    def __init__(
        self,
        name: str,
        policy: SchedulingPolicy,
        pools: Sequence[PoolView],
        *,
        chart_repository: str = KUEUE_CHART_REPOSITORY,
        install_kueue: bool = True,
        external_dependencies: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        objects = compile(policy, pools)  # raises SchedulerConfigError before anything is registered
        super().__init__("gpufleet:scheduler:GpuScheduling", name, None, opts)
        # Kueue enables its ProvisioningRequest admission check controller only when the CRD is served when it
        # starts (Kueue docs, "Provisioning Admission Check"), and the autoscaler chart does not ship the CRD.
        self.provisioning_crd: ConfigFile | None = None
        if policy.provisioning_requests and policy.provisioning_request_crd:
            self.provisioning_crd = ConfigFile(
                f"{name}-provisioningrequest-crd",
                file=policy.provisioning_request_crd,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(external_dependencies)),
            )
        before_kueue = [*external_dependencies, *([self.provisioning_crd] if self.provisioning_crd else [])]
        # install_kueue=False: the cluster runs Kueue already (`cluster.addons.kueue: existing`); its CRDs and
        # webhooks serve, so the custom resources wait only for the external dependencies.
        self.kueue: Release | None = None
        if install_kueue:
            self.kueue = Release(
                f"{name}-kueue",
                name=RELEASE_NAME,
                chart=f"{chart_repository.rstrip('/')}/kueue",
                version=policy.kueue_version,
                namespace=KUEUE_NAMESPACE,
                create_namespace=True,
                values=kueue_values(policy),
                opts=pulumi.ResourceOptions(parent=self, depends_on=before_kueue),
            )
        kueue_ready: list[pulumi.Resource] = [self.kueue] if self.kueue else before_kueue
        #: what "Kueue serves" means for objects that come after this component (its release, if any)
        self.ready: list[pulumi.Resource] = [self.kueue] if self.kueue else []
        self.resources: dict[str, pulumi.Resource] = {}
        for obj, deps in dependency_plan(objects):
            after = [r for d in deps for r in (kueue_ready if d == RELEASE else [self.resources[d]])]
            key = object_key(obj)
            self.resources[key] = apply_object(
                f"{name}-{key}",
                as_stored(obj),
                pulumi.ResourceOptions(parent=self, depends_on=[*external_dependencies, *after]),
            )
        # Resolves once every object is registered: a handle for "all scheduling objects applied".
        self.object_count = pulumi.Output.all(*(r.urn for r in self.resources.values())).apply(len)
        self.kueue_status = self.kueue.status if self.kueue else pulumi.Output.from_input("existing")
        self.register_outputs({"kueueStatus": self.kueue_status, "objectCount": self.object_count})


__all__ = ["GpuScheduling", "dependency_plan"]
