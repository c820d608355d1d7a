"""What a pod can request on one EKS node of a pool: capacity, less the kubelet's reservation, less the DaemonSets.

- **Allocatable** is capacity minus the kubelet's reservation. On EKS AMIs `kubeReserved` comes from the node's
  size (cpu: 6 % of the first core, 1 % of the second, 0.5 % of the next two, 0.25 % of the rest; memory:
  11 MiB x maxPods + 255 MiB; bottlerocket-os/bottlerocket sources/api/schnauzer and awslabs/amazon-eks-ami
  nodeadm, the same formula), plus the 100 MiB hard-eviction threshold. maxPods is the kubelet default (110).
- **Room** is allocatable less the requests of the DaemonSet pods on the node (`infra.aws.node_daemonsets`).

Kueue's quota for a pool counts each node's whole cores and memory (`scheduler.resources.cpu_for_gpus`), so a
job sized to a node's capacity, or to its allocatable, is admitted and then never scheduled.
`room_warnings` says so in the plan, per pool, naming the DaemonSets' overhead and the largest pod that fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra import catalog
from infra.aws.node_daemonsets import NodeDaemonSet, node_daemonsets
from infra.spec import ClusterSpec, NodePool

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


def room_warnings(spec: ClusterSpec) -> list[str]:
    """Per aws pool: the DaemonSets' overhead and the largest pod a node takes, since Kueue's quota counts the
    whole node and a job sized to the node's allocatable is admitted and stays Pending."""
    out = []
    for i, pool in enumerate(spec.node_pools):
        node = node_room(spec, pool)
        if node is None:
            continue
        (cpu, mib), (o_cpu, o_mib), (r_cpu, r_mib) = node.allocatable, node.overhead, node.room
        out.append(
            f"nodePools[{i}] ({pool.name}): the DaemonSets on each {node.instance_type} node "
            f"({', '.join(node.daemonsets)}) request cpu {o_cpu}m and memory {o_mib}Mi of its allocatable cpu "
            f"{cpu}m and memory {mib}Mi, so a pod fits a node with at most cpu {r_cpu}m and memory {r_mib}Mi; "
            f"Kueue's quota counts all {node.vcpus} cores, so a job sized to the node's allocatable is admitted "
            "and stays Pending"
        )
    return out
