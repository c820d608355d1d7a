"""A Pod's request and a Node's GPUs, at the granularity the Kubernetes API exposes.

- CPU and memory: ``cpu`` in milli-CPU and ``memory`` in MiB, from ``status.allocatable`` / container requests.
- Whole GPUs: ``nvidia.com/gpu`` — k GPUs of 1000 milli.
- Time-sliced GPUs: ``nvidia.com/gpu.shared`` (the device plugin's ``renameByDefault``); a node advertises
  ``gpus x replicas`` units and labels ``nvidia.com/gpu.replicas`` (GPU feature discovery). A container gets at
  most one replica (``failRequestsGreaterThanOne``), worth ``1000 / replicas`` milli of one GPU.
- MIG slices (``nvidia.com/mig-<profile>``) are whole devices to the scheduler; the extender does not score
  them (the profile fixes the slices, there is nothing to fragment) and lets such pods through unscored.

A pod's request follows kube-scheduler's rule (``pkg/api/v1/resource`` PodRequests): the sum over containers,
at least the largest init container, plus ``overhead``; a missing request of an extended resource defaults
to its limit (the API server's defaulting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity  # the official client's Quantity parser

from scheduler.labels import GPU_RESOURCE, SHARED_GPU_RESOURCE
from scheduler.sim.model import MILLI

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
MANAGED_RESOURCES = (GPU_RESOURCE, SHARED_GPU_RESOURCE)


@dataclass(frozen=True)
class PodRequest:
    cpu_milli: int
    memory_mib: int
    gpus: int  # whole GPUs
    replicas: int  # time-sliced replicas (0 or 1 per container)
    models: tuple[str, ...]  # allowed GPU products from a required node affinity, () = any

    @property
    def cpu_only(self) -> bool:
        return self.gpus == 0 and self.replicas == 0


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    replicas: int  # per GPU; 1 = whole GPUs
    model: str

    def replica_milli(self) -> int:
        return MILLI // self.replicas


def _quantity(value: Any) -> float:
    return float(parse_quantity(str(value))) if value is not None else 0.0


def _milli(value: Any) -> int:
    return round(_quantity(value) * 1000)


def _mib(value: Any) -> int:
    return int(_quantity(value) // (1024 * 1024))


def _container_requests(container: dict[str, Any]) -> dict[str, Any]:
    res = container.get("resources") or {}
    merged = dict(res.get("limits") or {})  # the API server defaults a missing request to its limit
    merged.update(res.get("requests") or {})
    return merged


def _models(pod: dict[str, Any]) -> tuple[str, ...]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In":
                return tuple(sorted(expr.get("values") or []))
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if GPU_PRODUCT_LABEL in selector:
        return (selector[GPU_PRODUCT_LABEL],)
    return ()


def pod_request(pod: dict[str, Any]) -> PodRequest:
    spec = pod.get("spec") or {}
    totals = {"cpu": 0, "memory": 0, GPU_RESOURCE: 0, SHARED_GPU_RESOURCE: 0}
    for c in spec.get("containers") or []:
        req = _container_requests(c)
        totals["cpu"] += _milli(req.get("cpu"))
        totals["memory"] += _mib(req.get("memory"))
        totals[GPU_RESOURCE] += int(_quantity(req.get(GPU_RESOURCE)))
        totals[SHARED_GPU_RESOURCE] += int(_quantity(req.get(SHARED_GPU_RESOURCE)))
    for c in spec.get("initContainers") or []:
        req = _container_requests(c)
        totals["cpu"] = max(totals["cpu"], _milli(req.get("cpu")))
        totals["memory"] = max(totals["memory"], _mib(req.get("memory")))
        totals[GPU_RESOURCE] = max(totals[GPU_RESOURCE], int(_quantity(req.get(GPU_RESOURCE))))
    overhead = spec.get("overhead") or {}
    return PodRequest(
        cpu_milli=totals["cpu"] + _milli(overhead.get("cpu")),
        memory_mib=totals["memory"] + _mib(overhead.get("memory")),
        gpus=totals[GPU_RESOURCE],
        replicas=totals[SHARED_GPU_RESOURCE],
        models=_models(pod),
    )


def node_capacity(node: dict[str, Any]) -> NodeCapacity:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    whole = int(_quantity(alloc.get(GPU_RESOURCE)))
    shared = int(_quantity(alloc.get(SHARED_GPU_RESOURCE)))
    replicas = max(int(labels.get(GPU_REPLICAS_LABEL, "1") or 1), 1) if shared else 1
    gpus = int(labels.get(GPU_COUNT_LABEL) or 0) or whole or shared // replicas
    return NodeCapacity(
        name=str(meta.get("name", "")),
        cpu_milli=_milli(alloc.get("cpu")),
        memory_mib=_mib(alloc.get("memory")),
        gpus=gpus,
        replicas=replicas,
        model=str(labels.get(GPU_PRODUCT_LABEL, "")),
    )
