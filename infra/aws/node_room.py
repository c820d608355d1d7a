"""What a pod can request on one EKS node of a pool: capacity, less the kubelet's reservation, less the DaemonSets.

- **Allocatable** is capacity minus the kubelet's reservation. On EKS AMIs `kubeReserved` comes from the node's
  size (cpu: 6 % of the first core, 1 % of the second, 0.5 % of the next two, 0.25 % of the rest; memory:
  11 MiB x maxPods + 255 MiB; bottlerocket-os/bottlerocket sources/api/schnauzer and awslabs/amazon-eks-ami
  nodeadm, the same formula), plus the 100 MiB hard-eviction threshold. maxPods is the kubelet default (110).
- **Room** is allocatable less the requests of the DaemonSet pods on the node (`infra.aws.node_daemonsets`).

The room is what a GPU unit's share of cores and memory is cut from (`scheduler.model.PoolView.pod_room`,
`scheduler.gpu_share`), so every unit of a node asked at its share fits the node, and a GPU pod sized to the
node's capacity or allocatable is refused when it is created. Where several pools expose one resource name the
largest share applies (admission does not know the pool yet): on the others such a pod is admitted and then never
scheduled, since Kueue's quota counts each node's whole cores and memory (`scheduler.resources.cpu_for_gpus`).
`room_warnings` says which, in the plan, per pool, naming the DaemonSets' overhead and the largest pod that fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra import catalog
from infra.aws.node_daemonsets import NodeDaemonSet, node_daemonsets
from infra.spec import ClusterSpec, NodePool
from scheduler.gpu_share import share_number, unit_shares
from scheduler.model import PoolView
from scheduler.resources import cpus_per_unit, gpu_resource, memory_gib_per_unit, units_per_gpu

MAX_PODS = 110
EVICTION_MIB = 100


def kube_reserved_cpu_milli(vcpus: int) -> int:
    """EKS AMIs' kubeReserved cpu: 6 % of the first core, 1 % of the second, 0.5 % of cores 3-4, 0.25 % above."""
    milli = 60 if vcpus >= 1 else 0
    milli += 10 if vcpus >= 2 else 0
    milli += 5 * min(max(vcpus - 2, 0), 2)
    milli += round(2.5 * max(vcpus - 4, 0))
    return milli


def allocatable_milli_mib(vcpus: int, memory_gib: int, eks: bool) -> tuple[int, int]:
    """A node's allocatable cpu (milli) and memory (MiB): on EKS less kubeReserved, everywhere less eviction."""
    reserved_mib = (11 * MAX_PODS + 255 if eks else 0) + EVICTION_MIB
    cpu = vcpus * 1000 - (kube_reserved_cpu_milli(vcpus) if eks else 0)
    return cpu, memory_gib * 1024 - reserved_mib


def _milli(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def _mib(value: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    return int(value[:-2]) * units[value[-2:]]


def overhead(daemonsets: list[NodeDaemonSet]) -> tuple[int, int]:
    """The DaemonSet pods' requests on one node: cpu (milli) and memory (MiB)."""
    cpu = sum(_milli(d.requests["cpu"]) for d in daemonsets if "cpu" in d.requests)
    memory = sum(_mib(d.requests["memory"]) for d in daemonsets if "memory" in d.requests)
    return cpu, memory


@dataclass(frozen=True)
class NodeRoom:
    pool: str
    instance_type: str
    vcpus: int
    allocatable: tuple[int, int]  # cpu milli, memory MiB
    overhead: tuple[int, int]
    daemonsets: tuple[str, ...]

    @property
    def room(self) -> tuple[int, int]:
        return self.allocatable[0] - self.overhead[0], self.allocatable[1] - self.overhead[1]


def node_room(spec: ClusterSpec, pool: NodePool) -> NodeRoom | None:
    """One node of an aws pool: its allocatable, its DaemonSets' overhead; None off aws or without a size."""
    itype = catalog.lookup(pool.instance_type or "")
    if spec.platform != "aws" or itype is None:
        return None
    daemonsets = node_daemonsets(spec, pool)
    return NodeRoom(
        pool.name, itype.name, itype.vcpus,
        allocatable_milli_mib(itype.vcpus, itype.memory_gib, eks=True), overhead(daemonsets),
        tuple(d.name for d in daemonsets if d.requests),
    )  # fmt: skip


def room_warnings(spec: ClusterSpec, pools: Sequence[PoolView]) -> list[str]:
    """Per aws pool: the DaemonSets' overhead, the largest pod a node takes and what a GPU pod may ask of it (the
    admission policy's share per GPU unit of the pool's ``pools`` view), and whether a job sized to the node's
    allocatable is refused when created or, where another pool's larger share of the resource applies, admitted
    by Kueue (whose quota counts the whole node) and left Pending."""
    shares = unit_shares(pools)
    views = {p.name: p for p in pools}
    out = []
    for i, pool in enumerate(spec.node_pools):
        node = node_room(spec, pool)
        view = views.get(pool.name)
        if node is None or view is None:
            continue
        (cpu, mib), (o_cpu, o_mib), (r_cpu, r_mib) = node.allocatable, node.overhead, node.room
        resource = gpu_resource(view)
        units = view.gpus_per_node * units_per_gpu(view)
        own = (cpus_per_unit(view), memory_gib_per_unit(view))
        applied = shares[resource]
        head = (
            f"nodePools[{i}] ({pool.name}): the DaemonSets on each {node.instance_type} node "
            f"({', '.join(node.daemonsets)}) request cpu {o_cpu}m and memory {o_mib}Mi of its allocatable cpu "
            f"{cpu}m and memory {mib}Mi, so a pod fits a node with at most cpu {r_cpu}m and memory {r_mib}Mi; "
        )
        if applied == own:  # the largest share of the resource is this pool's own
            out.append(
                head
                + f"a GPU pod may ask {share_number(own[0])} cores and {share_number(own[1])} GiB per {resource} unit "
                f"(that room over the node's {units}), so a job sized to the node's allocatable is refused when "
                "it is created"
            )
        else:
            larger = next(p.name for p in pools if gpu_resource(p) == resource
                          and (cpus_per_unit(p), memory_gib_per_unit(p)) == applied)  # fmt: skip
            out.append(
                head
                + f"a GPU pod may ask {share_number(applied[0])} cores and {share_number(applied[1])} GiB per "
                f"{resource} unit, {larger}'s share, as admission does not know the pool yet (this pool's own: "
                f"{share_number(own[0])} cores and {share_number(own[1])} GiB); Kueue's quota counts all {node.vcpus} cores, so a "
                "job sized to this node's allocatable is admitted and stays Pending"
            )
    return out
