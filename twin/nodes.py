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
- **GPU resources** are what the GPU operator's device plugin advertises under the stack's device-plugin
  config once its operands settle: whole GPUs, `nvidia.com/gpu.shared` = GPUs x replicas on time-sliced pools
  (renameByDefault), `nvidia.com/mig-<profile>` = GPUs x instances on MIG pools (mixed strategy), and EFA
  interfaces (`infra.aws.nodepools.node_template_resources`, the function that sizes the autoscaler's
  templates), with GPU feature discovery's labels (`nvidia.com/gpu.count`, `.product`, `.replicas`).
- **cpu/memory**: capacity from the catalog (or the spec's host sizes); allocatable minus the kubelet's
  reservation: on EKS AMIs `kubeReserved` from the node's size (cpu: 6 % of the first core, 1 % of the
  second, 0.5 % of the next two, 0.25 % of the rest; memory: 11 MiB x maxPods + 255 MiB;
  bottlerocket-os/bottlerocket sources/api/schnauzer and awslabs/amazon-eks-ami nodeadm, the same formula)
  and the 100 MiB hard-eviction threshold; on existing hosts only the kubelet's default 100 MiB eviction.
  maxPods is the kubelet default (110) everywhere (EKS derives it from ENIs; the twin has no network).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from infra import catalog
from infra.aws.nodepools import node_template_resources, plan_node_groups
from infra.pools import SYSTEM_GROUP, karpenter_managed
from infra.scheduling import pool_view
from infra.spec import ClusterSpec, NodePool
from scheduler.labels import GPU_TAINT, HOSTNAME_LABEL

KWOK_LABEL = "type"  # kwok manages nodes with this label (`--manage-nodes-with-label-selector=type=kwok`)
KWOK_VALUE = "kwok"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # kwok's own marker of a fake node (its docs' examples)
MAX_PODS = 110
EVICTION_MIB = 100
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

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": dict(self.labels),
                "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
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


def kube_reserved_cpu_milli(vcpus: int) -> int:
    """EKS AMIs' kubeReserved cpu: 6 % of the first core, 1 % of the second, 0.5 % of cores 3-4, 0.25 % above."""
    milli = 60 if vcpus >= 1 else 0
    milli += 10 if vcpus >= 2 else 0
    milli += 5 * min(max(vcpus - 2, 0), 2)
    milli += round(2.5 * max(vcpus - 4, 0))
    return milli


def _cpu_memory(vcpus: int, memory_gib: int, eks: bool) -> tuple[dict[str, str], dict[str, str]]:
    capacity = {"cpu": str(vcpus), "memory": f"{memory_gib * 1024}Mi", "pods": str(MAX_PODS)}
    reserved_mib = (11 * MAX_PODS + 255 if eks else 0) + EVICTION_MIB
    allocatable = {
        "cpu": f"{vcpus * 1000 - (kube_reserved_cpu_milli(vcpus) if eks else 0)}m",
        "memory": f"{memory_gib * 1024 - reserved_mib}Mi",
        "pods": str(MAX_PODS),
    }
    return capacity, allocatable


def _gpu_resources(spec: ClusterSpec, pool: NodePool) -> tuple[dict[str, str], dict[str, str]]:
    view = pool_view(spec, pool)
    resources = node_template_resources(view, view.efa_per_node)  # none for DRA shares: twin.dra
    as_text = {k: str(v) for k, v in resources.items()}
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(view.gpus_per_node),
        "nvidia.com/gpu.product": catalog.GPU_MODELS[view.gpu_model].product_label,
        "nvidia.com/gpu.deploy.device-plugin": "true",  # mig-manager sets paused operands back to true
        # the operator's per-operand switch its dcgm-exporter DaemonSet selects (state-dcgm-exporter
        # 0800_daemonset.yaml nodeSelector), set on every GPU node it manages
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
    }
    if view.sharing == "timeSlicing" and view.time_slicing_replicas:
        labels["nvidia.com/gpu.replicas"] = str(view.time_slicing_replicas)
        labels["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
    if view.sharing == "draShares":  # the DRA driver, not the device plugin, hands out its GPUs
        labels["nvidia.com/gpu.deploy.device-plugin"] = "false"
    if view.sharing == "mig":
        labels["nvidia.com/mig.config.state"] = "success"
        labels["nvidia.com/mig.strategy"] = "mixed"
    return as_text, labels


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
        if pool is not None:
            gpu, gpu_labels = _gpu_resources(spec, pool)
            capacity, allocatable = {**capacity, **gpu}, {**allocatable, **gpu}
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
                      allocatable, len(out))
            )  # fmt: skip
    return out


def _network_layers(pool: str, i: int) -> dict[str, str]:
    """EKS's network topology labels of an EFA instance: nodes of a pool share the upper layers, pairs share
    the lowest (a stand-in for the instance topology EKS reads from EC2 DescribeInstanceTopology)."""
    return {
        "topology.k8s.aws/network-node-layer-1": f"nn-{pool}-1",
        "topology.k8s.aws/network-node-layer-2": f"nn-{pool}-2",
        "topology.k8s.aws/network-node-layer-3": f"nn-{pool}-3-{i // 2}",
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
        gpu, gfd = _gpu_resources(spec, pool)
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
                      1000 + len(out))
            )  # fmt: skip
    return out


def _existing_nodes(spec: ClusterSpec) -> list[TwinNode]:
    out: list[TwinNode] = []
    for i in range(CPU_NODES):
        capacity, allocatable = _cpu_memory(*CPU_NODE_SIZE, eks=False)
        out.append(_node(f"twin-cpu-{i + 1}", "", {}, (), capacity, allocatable, i))
    for pool in spec.node_pools:
        gpu, gfd = _gpu_resources(spec, pool)
        capacity, allocatable = _cpu_memory(
            pool.cpus_per_node or 0, pool.memory_gi_b_per_node or 0, eks=False
        )
        for host in pool.hosts or []:
            out.append(
                _node(host, pool.name, gfd, (dict(GPU_TAINT),), {**capacity, **gpu}, {**allocatable, **gpu},
                      len(out))
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
) -> TwinNode:
    kubelet = {
        HOSTNAME_LABEL: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        KWOK_LABEL: KWOK_VALUE,
    }
    return TwinNode(name, pool, {**kubelet, **labels}, taints, allocatable, capacity, _address(index))


def twin_nodes(spec: ClusterSpec, nodes: NodeCount = "desired") -> list[TwinNode]:
    """Every node of the stack's cluster: desiredSize per autoscaled pool by default (`min`, `max` or a number
    per pool, within its min and max), every host of an existing cluster."""
    if spec.platform == "existing":
        return _existing_nodes(spec)
    return [*_aws_nodes(spec, nodes), *_karpenter_nodes(spec, nodes)]


__all__ = ["SYSTEM_GROUP", "NodeCount", "TwinNode", "twin_nodes"]
