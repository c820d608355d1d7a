"""GPU shares through Dynamic Resource Allocation (`sharing: dra-shares`): the DeviceClass, the teams'
ResourceClaimTemplates and Kueue's mapping that counts the shares against each team's quota.

The NVIDIA DRA driver started with `--consumable-shares=<N>` (feature gate `ConsumableShares`, alpha in 0.5;
kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/consumable_shares.go) publishes each GPU as one
device with `allowMultipleAllocations: true` and two consumable capacities: `shares` (N, a claim takes 1 by
default, 1..N in steps of 1) and `memory` (the GPU's memory, 0 by default, in steps of 1Mi). kube-scheduler
(DRAConsumableCapacity, beta and on in 1.36: pkg/features/kube_features.go at v1.36.4) places a claim on a
device whose free shares and memory cover its request, so several pods share one GPU and the scheduler chooses
which GPU each share is cut from.

Kueue 0.19.2 counts the shares a workload's ResourceClaimTemplates ask for under one logical resource
(`Configuration.resources.deviceClassMappings[].sources[].capacity`, apis/config/v1beta2/configuration_types.go;
the charge is the request rounded by the device's requestPolicy, pkg/dra/capacity.go), behind the alpha gate
`KueueDRAIntegrationConsumableCapacity` (pkg/features/kube_features.go; `KueueDRAIntegration` itself is beta
and on). Only claims made from templates are counted (determineCapacityForPodSet skips a pod's named
ResourceClaims), so teams ask for shares through the templates rendered here, or their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.labels import SHARE_RESOURCE, metadata
from scheduler.model import PoolView, SchedulingPolicy

API = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"  # the NVIDIA DRA driver's GPU kubelet plugin (cmd/gpu-kubelet-plugin/main.go)
SHARES = "shares"  # the capacity the driver's --consumable-shares=<N> publishes per GPU
MEMORY = "memory"
DEVICE_CLASS = "gpufleet-gpu-share"
REQUEST = "gpu"  # the request name inside each template's claim
KUEUE_GATE = "KueueDRAIntegrationConsumableCapacity"
# A whole GPU of the driver (its `type` attribute is "gpu", a MIG device's "mig") that publishes shares and memory
# as capacities: the driver adds `shares` only to a device it lets many claims share. The selector cannot say
# `device.allowMultipleAllocations` itself: Kueue 0.19.2 evaluates it on a device built from the driver,
# attributes and capacity alone (pkg/dra/counters.go, matchDevicesWithSelectors), where that field is false,
# so no device would match and every share job would stay inadmissible.
SELECTOR = (
    f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu" && '
    f'"{SHARES}" in device.capacity["{DRIVER}"] && "{MEMORY}" in device.capacity["{DRIVER}"]'
)


def share_pools(pools: Sequence[PoolView]) -> list[PoolView]:
    return [p for p in pools if p.sharing == "draShares"]


def template_name(shares: int, count: int = 1) -> str:
    """`gpu-share-<shares>` for one GPU; `gpu-share-<shares>-x<count>` for ``count`` GPUs."""
    return f"gpu-share-{shares}" if count == 1 else f"gpu-share-{shares}-x{count}"


def template_sizes(pools: Sequence[PoolView]) -> list[int]:
    """The share counts the rendered templates ask for: powers of two below the largest share count (a whole
    GPU is what an exclusive pool is for)."""
    most = max((p.dra_shares or 1 for p in share_pools(pools)), default=1)
    sizes, size = [], 1
    while size < most:
        sizes.append(size)
        size *= 2
    return sizes


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": metadata(DEVICE_CLASS),
        "spec": {"selectors": [{"cel": {"expression": SELECTOR}}]},
    }


def claim_spec(shares: int, count: int = 1) -> dict[str, Any]:
    """A claim's spec for ``count`` GPUs of the class, ``shares`` shares of each (all of a device's shares:
    the device, as a whole-GPU claim); its memory request is left at the driver's default (0): memory is a
    placement hint the scheduler counts, not a limit (docs/scheduling.md, GPU shares through DRA)."""
    request = {
        "name": REQUEST,
        "exactly": {
            "deviceClassName": DEVICE_CLASS,
            "allocationMode": "ExactCount",
            "count": count,
            "capacity": {"requests": {SHARES: str(shares)}},
        },
    }
    return {"devices": {"requests": [request]}}


def claim_template(namespace: str, shares: int, count: int = 1) -> dict[str, Any]:
    """A template of claims for `shares` shares of each of ``count`` GPUs (:func:`claim_spec`); Kueue counts
    only claims made from templates, so a pod that is to pass its quota asks through one."""
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": metadata(template_name(shares, count), namespace),
        "spec": {"spec": claim_spec(shares, count)},
    }


def resource_claim(namespace: str, name: str, shares: int, count: int = 1) -> dict[str, Any]:
    """A named claim of :func:`claim_spec` (one pod's, made by hand rather than from a template)."""
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(shares, count),
    }


def share_objects(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """The DeviceClass and each team namespace's templates, when a pool shares its GPUs through DRA."""
    if not share_pools(pools):
        return []
    templates = [
        claim_template(team.namespace, size) for team in policy.teams for size in template_sizes(pools)
    ]
    return [device_class(), *templates]


def device_class_mappings() -> list[dict[str, Any]]:
    """Kueue's mapping (config v1beta2): the class's claims are charged their shares under SHARE_RESOURCE."""
    source = {
        "capacity": {"name": SHARES, "driver": DRIVER, "deviceSelector": {"cel": {"expression": SELECTOR}}}
    }
    return [{"name": SHARE_RESOURCE, "deviceClassNames": [DEVICE_CLASS], "sources": [source]}]
