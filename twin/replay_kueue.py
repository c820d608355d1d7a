"""Kueue in a replay twin's loop (`--kueue`): every pod is submitted as a team submits it, through a LocalQueue,
and placed only once the real Kueue 0.19.2 has admitted it and counted its GPU shares.

What runs is what a stack with a `dra-shares` pool compiles: Kueue's chart rendered with the stack's values
(`scheduler.kueue_config.kueue_values`: its `deviceClassMappings` and the `KueueDRAIntegrationConsumableCapacity`
gate), run as the twin runs it (`twin.kueue`), the DeviceClass and ResourceClaimTemplates of `scheduler.dra`,
and the namespace label the stack's `managedJobsNamespaceSelector` selects. The pod integration carries the
pod's spec, its claims included, into the Workload's pod set (kueue@v0.19.2
pkg/controller/jobs/pod/pod_controller.go:418, 758-759), and Kueue charges the shares of claims made from
templates (pkg/dra/capacity.go:69-86). A claim named in the pod (`resourceClaimName`) would leave the Workload
inadmissible ("KueueDRAIntegration feature does not support use of resource claims":
pkg/controller/core/workload_controller.go:452-459, pkg/workload/workload.go:1302), so under Kueue every pod
asks through a template rather than a claim of its own.

One ClusterQueue holds the whole sampled cluster as quota (its cores, memory and every GPU's shares), so
admission never holds placement back, in the compiler's `gpu-cores` flavor, which selects no node: a pool's
flavor would add that pool's node selector at admission, and a pod the trace lets go to several pools would be
pinned to the first with quota, which is a placement decision the replay leaves to the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.versions import KUEUE_VERSION
from scheduler.checks import GPU_CORES_FLAVOR
from scheduler.fgd.model import Cluster
from scheduler.kueue import API as KUEUE_API
from scheduler.kueue import LOCAL_QUEUE, resource_flavors
from scheduler.kueue_config import QUEUE_MANAGED_LABEL, kueue_values
from scheduler.labels import SHARE_RESOURCE
from scheduler.labels import metadata as _meta
from scheduler.model import SchedulingPolicy

if TYPE_CHECKING:
    from twin.controlplane import ControlPlane
    from twin.kubectl import Kubectl
    from twin.processes import Supervisor
    from twin.toolchain.build import Toolchain

QUEUE = "replay"  # the ClusterQueue
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADMISSION_GATE = "kueue.x-k8s.io/admission"  # the gate Kueue's pod webhook puts on a pod until it is admitted
CPU_RESOURCES = ("cpu", "memory")


def replay_policy() -> SchedulingPolicy:
    """The scheduling policy of a stack with a `dra-shares` pool, on an existing cluster, as far as Kueue's
    configuration goes (no team: the replay's one queue is made here)."""
    return SchedulingPolicy(
        kueue_version=KUEUE_VERSION, dra_shares=True, platform="existing", fair_sharing=False
    )


@dataclass(frozen=True)
class Quota:
    """What the replay's ClusterQueue holds: all of the sampled cluster."""

    cpu_milli: int
    memory_mib: int
    shares: int


def cluster_quota(cluster: Cluster, units: dict[str, int], claims: frozenset[str]) -> Quota:
    """The cluster's cores, memory and the shares of every GPU of a pool of claims."""
    shares = sum(
        int(g) * units[str(m)]
        for g, m in zip(cluster.num_gpu, cluster.gpu_model, strict=True)
        if str(m) in claims
    )
    return Quota(int(cluster.cpu_milli.sum()), int(cluster.memory_mib.sum()), shares)


def queue_objects(quota: Quota, namespace: str) -> list[dict[str, Any]]:
    """The `gpu-cores` flavor, the ClusterQueue with the whole cluster in it and the namespace's LocalQueue."""
    flavor = next(
        f for f in resource_flavors(replay_policy(), []) if f["metadata"]["name"] == GPU_CORES_FLAVOR
    )
    resources = [
        {"name": "cpu", "nominalQuota": f"{quota.cpu_milli}m"},
        {"name": "memory", "nominalQuota": f"{quota.memory_mib}Mi"},
        {"name": SHARE_RESOURCE, "nominalQuota": quota.shares},
    ]
    group = {"coveredResources": [*CPU_RESOURCES, SHARE_RESOURCE],
             "flavors": [{"name": GPU_CORES_FLAVOR, "resources": resources}]}  # fmt: skip
    queue = {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": _meta(QUEUE),
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [group],
        },
    }
    local = {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": _meta(LOCAL_QUEUE, namespace),
             "spec": {"clusterQueue": QUEUE}}  # fmt: skip
    return [flavor, queue, local]


def managed_namespace(namespace: str) -> dict[str, Any]:
    """The replay's namespace with the label the stack's `managedJobsNamespaceSelector` selects (Kueue's pod
    webhook gates no pod outside it)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {QUEUE_MANAGED_LABEL: "true"}}}  # fmt: skip


def queued(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with the queue-name label a team's pod carries."""
    labels = {**(pod["metadata"].get("labels") or {}), QUEUE_LABEL: LOCAL_QUEUE}
    return {**pod, "metadata": {**pod["metadata"], "labels": labels}}


# ---- inside the replay twin's namespaces ---------------------------------------------------------------


def install(
    tools: Toolchain, plane: ControlPlane, kubectl: Kubectl, sup: Supervisor, folder: Path, minor: str
) -> None:
    """Kueue from the stack's chart values, as every twin installs it (`twin.kueue.install`), less the chart's
    Deployment: its pods would take cores on the replay's nodes. Waits until Kueue serves its webhooks and is
    ready."""
    from twin import kueue as part

    part.install(tools, plane, kubectl, sup, folder, kueue_values(replay_policy()), minor, deployment=False)


# ---- on the machine: what Kueue admitted and counted ------------------------------------------------------


def _count(value: Any) -> int:
    """A quantity as the API server writes it ("12", "1k") as a whole number."""
    from kubernetes.utils import parse_quantity

    return int(parse_quantity(str(value)))


def _when(conditions: list[dict[str, Any]] | None, kind: str) -> str | None:
    for c in conditions or []:
        if c.get("type") == kind and c.get("status") == "True":
            return str(c["lastTransitionTime"])
    return None


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Admitted:
    """One bound pod as Kueue saw it: when its Workload was admitted, when the pod was bound (both as the API
    server stamps them, to the second), and the shares Kueue counted for it."""

    pod: str
    admitted: str | None
    bound: str | None
    counted_shares: int

    @property
    def admitted_before_bound(self) -> bool:
        return (
            self.admitted is not None
            and self.bound is not None
            and _seconds(self.admitted) <= _seconds(self.bound)
        )


def admissions(workloads: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[Admitted]:
    """Per bound pod, its Workload's admission (the pod integration's Workload is owned by its pod)."""
    by_pod = {}
    for wl in workloads:
        for owner in wl["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == "Pod":
                by_pod[owner["name"]] = wl
    out = []
    for pod in pods:
        if not pod["spec"].get("nodeName"):
            continue
        name = pod["metadata"]["name"]
        wl = by_pod.get(name, {})
        status = wl.get("status") or {}
        assignments = (status.get("admission") or {}).get("podSetAssignments") or []
        counted = sum(_count((a.get("resourceUsage") or {}).get(SHARE_RESOURCE, 0)) for a in assignments)
        out.append(Admitted(name, _when(status.get("conditions"), "Admitted"),
                            _when((pod.get("status") or {}).get("conditions"), "PodScheduled"), counted))  # fmt: skip
    return out


def queue_usage(queue: dict[str, Any], resource: str = SHARE_RESOURCE) -> int:
    """A ClusterQueue's admitted usage of ``resource`` (status.flavorsUsage, every flavor)."""
    return sum(
        _count(r.get("total", 0))
        for f in (queue.get("status") or {}).get("flavorsUsage") or []
        for r in f.get("resources") or []
        if r["name"] == resource
    )


def claimed_shares(claims: list[dict[str, Any]], capacity: str) -> int:
    """The shares the allocator gave the claims: ``capacity`` consumed on every allocated device."""
    return sum(
        _count((r.get("consumedCapacity") or {}).get(capacity, 0))
        for c in claims
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results", [])
    )


def summary(records: list[Admitted], usage: int, claimed: int) -> dict[str, Any]:
    """The figures a replay through Kueue reports."""
    return {
        "kueue_admitted": len(records),
        "kueue_counted_shares": sum(r.counted_shares for r in records),
        "kueue_queue_usage": usage,
        "claimed_shares": claimed,
        "admitted_after_bound": sum(not r.admitted_before_bound for r in records),
    }
