"""The twin's nodes: one kwok Node per node of the stack's pools, as that node registers on the real platform.

Pure: a spec in, Node objects out. What a node carries is derived from the same functions the platform code
uses, so a twin node and a real node cannot drift apart:

- **aws** (managed node groups): the node group's labels and taints (`infra.aws.nodepools.plan_node_groups`:
  the pool's labels, the AMI's operand switches, the GPU taint), plus the labels EKS and the kubelet set
  (`eks.amazonaws.com/nodegroup`, `eks.amazonaws.com/capacityType`, instance type, zone, the EKS network
  layers of EFA-capable instances). Karpenter pools carry the NodePool's template labels plus
  `karpenter.sh/nodepool` and `karpenter.sh/capacity-type`. The system pool is untainted.
- **existing**: each host of the stack registers with the kubelet's labels and the GPU taint the docs require
  (docs/existing.md, "Taints are left to whoever registers the nodes"), and *without* gpufleet's labels:
  those are what `invoke deploy` adds (a server-side-apply node patch), so the twin shows that it does.
  An existing cluster has CPU nodes too; the twin adds `CPU_NODES` untainted ones for the platform's pods.
- **GPU resources** are not registered: a GPU node describes its GPUs (`gpufleet.io/twin-gpus`) and the
  device plugin's stand-in (`twin.gpu_operands`) advertises them and GPU feature discovery's labels from the
  deployed device-plugin ConfigMap and the node's config label. The node registers the EFA interfaces and
  the operator's `nvidia.com/gpu.present` and `gpu.deploy.*` labels. `template` is what the autoscaler knows
  of a group without a node: capacity plus the group's node-template resources
  (`infra.aws.nodepools.node_template_resources`, the function that writes those tags).
- **cpu/memory**: capacity from the catalog (or the spec's host sizes); allocatable minus the kubelet's
  reservation (`infra.aws.node_room`: on EKS AMIs `kubeReserved` and the hard-eviction threshold, on existing
  hosts only the eviction threshold). maxPods is the kubelet default (110) everywhere (EKS derives it from
  ENIs; the twin has no network).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from infra import catalog
from infra.aws.node_room import MAX_PODS, allocatable_milli_mib
from infra.aws.nodepools import node_template_resources, plan_node_groups
from infra.pools import SYSTEM_GROUP, karpenter_managed
from infra.scheduling import pool_view
from infra.spec import ClusterSpec, NodePool
from scheduler.labels import GPU_TAINT, HOSTNAME_LABEL

KWOK_LABEL = "type"  # kwok manages nodes with this label (`--manage-nodes-with-label-selector=type=kwok`)
KWOK_VALUE = "kwok"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # kwok's own marker of a fake node (its docs' examples)
CPU_NODES = 2  # existing platform: untainted CPU nodes for the platform's own pods
CPU_NODE_SIZE = (8, 32)  # vCPUs, GiB
NodeCount = Literal["desired", "min", "max"] | int


@dataclass(frozen=True)
class TwinNode:
    name: str
    pool: str  # "" for CPU nodes
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...]
    allocatable: dict[str, str]
    capacity: dict[str, str]
    address: str
    annotations: dict[str, str] = field(default_factory=dict)
    template: dict[str, str] = field(
        default_factory=dict
    )  # the autoscaler's view from zero: capacity and tags

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": dict(self.labels),
                "annotations": {
                    KWOK_ANNOTATION: "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                    **self.annotations,
                },
            },
            "spec": {"taints": [dict(t) for t in self.taints]},
            "status": {
                "allocatable": dict(self.allocatable),
                "capacity": dict(self.capacity),
                "addresses": [
                    {"type": "InternalIP", "address": self.address},
                    {"type": "Hostname", "address": self.name},
                ],
            },
        }


def _cpu_memory(vcpus: int, memory_gib: int, eks: bool) -> tuple[dict[str, str], dict[str, str]]:
    capacity = {"cpu": str(vcpus), "memory": f"{memory_gib * 1024}Mi", "pods": str(MAX_PODS)}
    cpu, memory = allocatable_milli_mib(vcpus, memory_gib, eks)
    allocatable = {"cpu": f"{cpu}m", "memory": f"{memory}Mi", "pods": str(MAX_PODS)}
    return capacity, allocatable


def _gpu_resources(
    spec: ClusterSpec, pool: NodePool
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """What a GPU node of the pool registers with: (resources, labels, annotations). Its GPUs are described for
    the device plugin's stand-in (`twin.gpu_operands`), which advertises them once it has read the deployed
    config; the node itself registers only the EFA interfaces (the EFA plugin is not played) and the labels the
    operator puts on every GPU node it manages."""
    from twin.gpu_operands import HARDWARE_ANNOTATION

    view = pool_view(spec, pool)
    efa = {k: str(v) for k, v in node_template_resources(view, view.efa_per_node).items() if "efa" in k}
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",  # mig-manager sets paused operands back to true
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        # the operator's per-operand switch its dcgm-exporter DaemonSet selects (state-dcgm-exporter
        # 0800_daemonset.yaml nodeSelector), set on every GPU node it manages
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
    }
    gpus = {
        "model": view.gpu_model,
        "count": view.gpus_per_node,
        "driver": spec.versions.nvidia_driver_version,
    }
    if view.sharing == "draShares":  # the DRA driver (twin.dra), not the device plugin, hands out its GPUs
        labels["nvidia.com/gpu.deploy.device-plugin"] = "false"
        return efa, labels, {}
    return efa, labels, {HARDWARE_ANNOTATION: json.dumps(gpus, sort_keys=True)}


def _template(spec: ClusterSpec, pool: NodePool) -> dict[str, str]:
    """The GPU resources of the autoscaler's template for the pool (its node-template tags), which the
    autoscaler reads from the group, not from a node."""
    view = pool_view(spec, pool)
    return {k: str(v) for k, v in node_template_resources(view, view.efa_per_node).items()}


def _count(pool: NodePool, nodes: NodeCount) -> int:
    if isinstance(nodes, int):
        return max(min(nodes, pool.max_size or 0), pool.min_size or 0)
    if nodes == "max":
        return pool.max_size or 0
    if nodes == "min":
        return pool.min_size or 0
    return pool.desired_size if pool.desired_size is not None else (pool.min_size or 0)


def _system_count(spec: ClusterSpec, nodes: NodeCount) -> int:
    sp = spec.system_pool
    if nodes == "max":
        return sp.max_size
    if nodes == "min":
        return sp.min_size
    return sp.desired_size  # the platform's own pods need it whatever a GPU pool's number is


def _address(index: int) -> str:
    """A private-range InternalIP, as a real node has; nothing in the twin ever dials it."""
    return f"10.240.{index // 250}.{index % 250 + 1}"


def _zone(spec: ClusterSpec, pool: NodePool | None, i: int) -> str:
    zones = [pool.availability_zone] if pool and pool.availability_zone else []
    zones = zones or list(
        (pool.availability_zones if pool else None) or spec.cluster.availability_zones or []
    )
    return zones[i % len(zones)] if zones else f"{spec.region or 'local'}a"


def _aws_nodes(spec: ClusterSpec, nodes: NodeCount) -> list[TwinNode]:
    out: list[TwinNode] = []
    pools = {p.name: p for p in spec.node_pools}
    for plan in plan_node_groups(spec):
        pool = pools.get(plan.pool)
        if pool is not None and karpenter_managed(spec, pool):
            continue  # no node group: see _karpenter_nodes
        count = _count(pool, nodes) if pool else _system_count(spec, nodes)
        itype = catalog.CATALOG[plan.instance_type]
        capacity, allocatable = _cpu_memory(itype.vcpus, itype.memory_gib, eks=True)
        gpu_labels: dict[str, str] = {}
        described: dict[str, str] = {}
        template = dict(capacity)
        if pool is not None:
            gpu, gpu_labels, described = _gpu_resources(spec, pool)
            capacity, allocatable = {**capacity, **gpu}, {**allocatable, **gpu}
            template = {**capacity, **_template(spec, pool)}
        labels = {
            **plan.labels,
            **gpu_labels,
            "eks.amazonaws.com/nodegroup": plan.name,
            "eks.amazonaws.com/capacityType": plan.capacity_type,
            "node.kubernetes.io/instance-type": plan.instance_type,
            "topology.kubernetes.io/region": spec.region or "",
        }
        for i in range(count):
            name = f"{plan.name}-{i:03d}"
            extra = {"topology.kubernetes.io/zone": _zone(spec, pool, i)}
            if pool is not None and pool.efa:
                extra.update(_network_layers(plan.pool, i))
            out.append(
                _node(name, plan.pool if pool else "", {**labels, **extra}, plan.taints, capacity,
                      allocatable, len(out), described, template)
            )  # fmt: skip
    return out


LAYER3_DOMAINS = 2


def _network_layers(pool: str, i: int) -> dict[str, str]:
    """EKS's network topology labels of an EFA instance (a stand-in for the instance topology EKS reads from
    EC2 DescribeInstanceTopology): nodes of a pool share the upper layers, and the lowest alternates between
    LAYER3_DOMAINS network nodes in launch order, as EC2 spreads instances it launches together. Neither
    cluster-autoscaler nor the twin's stand-in looks at these labels, so nodes added together land on
    different domains, and a gang on one domain is Kueue's topology-aware placement choosing among them."""
    return {
        "topology.k8s.aws/network-node-layer-1": f"nn-{pool}-1",
        "topology.k8s.aws/network-node-layer-2": f"nn-{pool}-2",
        "topology.k8s.aws/network-node-layer-3": f"nn-{pool}-3-{i % LAYER3_DOMAINS}",
    }


def _karpenter_nodes(spec: ClusterSpec, nodes: NodeCount) -> list[TwinNode]:
    from infra.aws.nodepools import gpu_labels

    out: list[TwinNode] = []
    for pool in spec.node_pools:
        if not karpenter_managed(spec, pool):
            continue
        view = pool_view(spec, pool)
        itype = catalog.CATALOG[pool.instance_type or ""]
        capacity, allocatable = _cpu_memory(itype.vcpus, itype.memory_gib, eks=True)
        gpu, gfd, described = _gpu_resources(spec, pool)
        kind = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "reserved"}[pool.capacity_type]
        labels = {
            **gpu_labels(view, str(pool.ami_family)),
            **gfd,
            "karpenter.sh/nodepool": pool.name,
            "karpenter.sh/capacity-type": kind,
            "node.kubernetes.io/instance-type": itype.name,
            "topology.kubernetes.io/region": spec.region or "",
        }
        for i in range(_count(pool, nodes)):
            extra = {"topology.kubernetes.io/zone": _zone(spec, pool, i)}
            if pool.efa:
                extra.update(_network_layers(pool.name, i))
            out.append(
                _node(f"{spec.cluster.name}-{pool.name}-k{i:03d}", pool.name, {**labels, **extra},
                      tuple(dict(t) for t in view.taints), {**capacity, **gpu}, {**allocatable, **gpu},
                      1000 + len(out), described, {**capacity, **_template(spec, pool)})
            )  # fmt: skip
    return out


def _existing_nodes(spec: ClusterSpec) -> list[TwinNode]:
    out: list[TwinNode] = []
    for i in range(CPU_NODES):
        capacity, allocatable = _cpu_memory(*CPU_NODE_SIZE, eks=False)
        out.append(_node(f"twin-cpu-{i + 1}", "", {}, (), capacity, allocatable, i))
    for pool in spec.node_pools:
        gpu, gfd, described = _gpu_resources(spec, pool)
        capacity, allocatable = _cpu_memory(
            pool.cpus_per_node or 0, pool.memory_gi_b_per_node or 0, eks=False
        )
        for host in pool.hosts or []:
            out.append(
                _node(host, pool.name, gfd, (dict(GPU_TAINT),), {**capacity, **gpu}, {**allocatable, **gpu},
                      len(out), described)
            )  # fmt: skip
    return out


def _node(
    name: str,
    pool: str,
    labels: dict[str, str],
    taints: tuple[dict[str, str], ...],
    capacity: dict[str, str],
    allocatable: dict[str, str],
    index: int,
    annotations: dict[str, str] | None = None,
    template: dict[str, str] | None = None,
) -> TwinNode:
    kubelet = {
        HOSTNAME_LABEL: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        KWOK_LABEL: KWOK_VALUE,
    }
    return TwinNode(
        name, pool, {**kubelet, **labels}, taints, allocatable, capacity, _address(index),
        dict(annotations or {}), dict(template or capacity),
    )  # fmt: skip


def twin_nodes(
    spec: ClusterSpec, nodes: NodeCount = "desired", *, karpenter_nodes: bool = True
) -> list[TwinNode]:
    """Every node of the stack's cluster: desiredSize per autoscaled pool by default (`min`, `max` or a number
    per pool, within its min and max), every host of an existing cluster. Without `karpenter_nodes`, none of
    Karpenter's pools: the twin's real Karpenter launches those."""
    if spec.platform == "existing":
        return _existing_nodes(spec)
    return [*_aws_nodes(spec, nodes), *(_karpenter_nodes(spec, nodes) if karpenter_nodes else [])]


__all__ = ["SYSTEM_GROUP", "NodeCount", "TwinNode", "twin_nodes"]
