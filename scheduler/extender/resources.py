"""A Pod's request and a Node's GPUs, at the granularity the Kubernetes API exposes.

- CPU and memory: ``cpu`` in milli-CPU and ``memory`` in MiB, from ``status.allocatable`` / container requests.
- Whole GPUs: ``nvidia.com/gpu`` — k GPUs of 1000 milli. A node's whole GPUs are its ``nvidia.com/gpu``
  allocatable, what kube-scheduler counts, not the ``nvidia.com/gpu.count`` label of GPU feature discovery:
  under the GPU operator's ``mixed`` MIG strategy (gpufleet's) a GPU in MIG mode is advertised only as its
  ``nvidia.com/mig-<profile>`` slices, so a MIG node has 0 whole GPUs however many the label counts.
- Time-sliced GPUs: ``nvidia.com/gpu.shared`` (the device plugin's ``renameByDefault``); a node advertises
  ``gpus x replicas`` units and labels ``nvidia.com/gpu.replicas`` (GPU feature discovery). Each container gets
  its own allocation, at most one replica (``failRequestsGreaterThanOne``: NVIDIA/k8s-device-plugin
  ``internal/plugin/server.go`` ``Allocate`` checks ``len(req.DevicesIDs) > 1`` per ``ContainerRequests``
  entry), worth ``1000 / replicas`` milli of one GPU; a pod's replicas are the sum over its containers, which is
  what counts against the node's allocatable.
- MIG slices (``nvidia.com/mig-<profile>``) are not modelled: a MIG pod is a CPU-only pod to the extender. Its
  CPU and memory count, and prioritize scores it by what its CPU does to the fragmentation of a node's whole
  and time-sliced GPUs; a MIG node has none, so MIG nodes tie and the profile's own scores choose among them,
  while a whole-GPU node whose GPUs the pod's CPU would strand scores lower.

A pod's request follows kube-scheduler's NodeResourcesFit, ``PodRequests`` of k8s.io/component-helpers
v0.35.8 ``resource/helpers.go`` (= kubernetes v1.35.8 ``staging/src/k8s.io/component-helpers/resource``;
``PodRequests`` :149-184, ``AggregateContainerRequests`` :191-278): app containers add up; a restartable init
container (a native sidecar, ``restartPolicy: Always``) adds to them too (:255-261), and every other init
container needs its own request plus the sidecars started before it; the pod needs the larger of the two.
Pod-level ``spec.resources.requests`` (PodLevelResources, beta and on by default since 1.34) replace the CPU and
memory of the containers' sum, and ``spec.overhead`` is added last (:179-182). A missing container request
defaults to its limit (kubernetes v1.35.8 ``pkg/apis/core/v1/defaults.go`` ``SetDefaults_Pod``, the API
server's defaulting, so hand-made pods count as the API would store them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity  # the official client's Quantity parser

from scheduler.fgd.model import MILLI
from scheduler.labels import GPU_RESOURCE, POOL_LABEL, SHARED_GPU_RESOURCE

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery
GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # physical GPUs, MIG ones included: not what the node allocates
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
MANAGED_RESOURCES = (GPU_RESOURCE, SHARED_GPU_RESOURCE)
POD_LEVEL_RESOURCES = ("cpu", "memory")  # IsSupportedPodLevelResource (hugepages are not modelled)

Amounts = dict[str, int]  # cpu: milli-CPU, memory: bytes, GPU resources: devices


@dataclass(frozen=True)
class PodRequest:
    cpu_milli: int
    memory_mib: int
    gpus: int  # whole GPUs
    replicas: int  # time-sliced replicas of the whole pod (what counts against nvidia.com/gpu.shared)
    models: tuple[str, ...]  # allowed GPU products from a required node affinity, () = any
    replicas_per_container: int = 0  # the most replicas one container asks for (the device plugin allows 1)

    @property
    def cpu_only(self) -> bool:
        return self.gpus == 0 and self.replicas == 0

    @property
    def refused_by_device_plugin(self) -> bool:
        """A container asks for more than one time-sliced replica: no node can ever run it."""
        return self.replicas_per_container > 1


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    replicas: int  # per GPU; 1 = whole GPUs
    model: str
    pool: str = ""  # its gpufleet.io/pool label ("" on a node of no pool)

    def replica_milli(self) -> int:
        return MILLI // self.replicas


def _quantity(value: Any) -> float:
    return float(parse_quantity(str(value))) if value is not None else 0.0


def _milli(value: Any) -> int:
    return round(_quantity(value) * 1000)


def _mib(value: Any) -> int:
    return int(_quantity(value) // (1024 * 1024))


def _amounts(resources: dict[str, Any]) -> Amounts:
    return {
        "cpu": _milli(resources.get("cpu")),
        "memory": int(_quantity(resources.get("memory"))),
        GPU_RESOURCE: int(_quantity(resources.get(GPU_RESOURCE))),
        SHARED_GPU_RESOURCE: int(_quantity(resources.get(SHARED_GPU_RESOURCE))),
    }


def _container_requests(container: dict[str, Any]) -> Amounts:
    res = container.get("resources") or {}
    merged = dict(res.get("limits") or {})  # the API server defaults a missing request to its limit
    merged.update(res.get("requests") or {})
    return _amounts(merged)


def _add(total: Amounts, more: Amounts) -> Amounts:
    return {k: total.get(k, 0) + more.get(k, 0) for k in {**total, **more}}


def _max(total: Amounts, more: Amounts) -> Amounts:
    return {k: max(total.get(k, 0), more.get(k, 0)) for k in {**total, **more}}


def _is_sidecar(container: dict[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"  # isRestartableInitContainer


def aggregate_requests(
    containers: Iterable[dict[str, Any]], init_containers: Iterable[dict[str, Any]]
) -> Amounts:
    """``AggregateContainerRequests``: app containers and sidecars add up; an ordinary init container runs
    beside the sidecars declared before it; the pod needs the larger of the running sum and the init peak."""
    total = _amounts({})
    for container in containers:
        total = _add(total, _container_requests(container))
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for container in init_containers:
        req = _container_requests(container)
        if _is_sidecar(container):
            total, sidecars = _add(total, req), _add(sidecars, req)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(req, sidecars))
    return _max(total, init_peak)


def _pod_level(spec: dict[str, Any], total: Amounts) -> Amounts:
    """Pod-level requests replace the containers' sum for the resources they name (PodRequests :155-176)."""
    requests = (spec.get("resources") or {}).get("requests") or {}
    named = {k: v for k, v in _amounts(requests).items() if k in POD_LEVEL_RESOURCES and k in requests}
    return {**total, **named}


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


def _replicas_per_container(spec: dict[str, Any]) -> int:
    every = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    return max((_container_requests(c)[SHARED_GPU_RESOURCE] for c in every), default=0)


def pod_request(pod: dict[str, Any]) -> PodRequest:
    """What the pod takes from a node's allocatable, as kube-scheduler counts it (``PodRequests``)."""
    spec = pod.get("spec") or {}
    total = aggregate_requests(spec.get("containers") or [], spec.get("initContainers") or [])
    total = _add(_pod_level(spec, total), _amounts(spec.get("overhead") or {}))
    return PodRequest(
        cpu_milli=total["cpu"],
        memory_mib=total["memory"] // (1024 * 1024),
        gpus=total[GPU_RESOURCE],
        replicas=total[SHARED_GPU_RESOURCE],
        models=_models(pod),
        replicas_per_container=_replicas_per_container(spec),
    )


def node_capacity(node: dict[str, Any]) -> NodeCapacity:
    """A node's room as its ``status.allocatable`` gives it: whole GPUs from ``nvidia.com/gpu``, time-sliced
    GPUs from ``nvidia.com/gpu.shared`` divided by the replicas per GPU; MIG GPUs are no whole GPUs."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    whole = int(_quantity(alloc.get(GPU_RESOURCE)))
    shared = int(_quantity(alloc.get(SHARED_GPU_RESOURCE)))
    replicas = max(int(labels.get(GPU_REPLICAS_LABEL, "1") or 1), 1) if shared else 1
    return NodeCapacity(
        name=str(meta.get("name", "")),
        cpu_milli=_milli(alloc.get("cpu")),
        memory_mib=_mib(alloc.get("memory")),
        gpus=whole or shared // replicas,
        replicas=replicas,
        model=str(labels.get(GPU_PRODUCT_LABEL, "")),
        pool=str(labels.get(POOL_LABEL, "")),
    )


def asks_gpu_resource(pod: dict[str, Any]) -> bool:
    """Any container (init containers included) requests or limits an ``nvidia.com/`` resource: whole GPUs,
    time-sliced replicas or MIG slices, every resource the extender's ``managedResources`` can list."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = container.get("resources") or {}
        for amounts in (res.get("requests") or {}, res.get("limits") or {}):
            if any(str(name).startswith("nvidia.com/") for name in amounts):
                return True
    return False
