"""Idle GPU reclaim: which Kueue workloads hold only idle GPUs, and the patch that deactivates them.

The idle signal is the `GpuAllocatedIdle` alert itself (firing = a pod held a GPU below 5% utilisation for its
team's `idleAfter`), so the alert, the report and the reclaim share one definition. A workload is a candidate
only when every GPU its pods hold is idle. Deactivation is Kueue's own mechanism: `spec.active: false` on the
Workload (v1beta2 `WorkloadSpec.Active`: "false indicates that a workload should never be admitted and evicts
running workloads"); Kueue evicts it, marks it Deactivated, and never readmits it until a person sets it back.
Pods are matched to a Workload through their controller: the Workload's owner (Job, PyTorchJob, RayCluster, ...)
is the pods' controller, or its `kueue.x-k8s.io/job-uid` label names the pods' controller's UID.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from infra.monitoring import metrics as m
from infra.monitoring.prometheus import Prometheus
from infra.spec import ClusterSpec

ANNOTATION = "gpufleet.io/reclaimed"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on Workloads (pkg/controller/constants, Kueue v0.19.2)
IDLE_ALERTS = 'ALERTS{alertname="GpuAllocatedIdle",alertstate="firing"}'
GPU_PODS = f'count by (namespace, pod) ({m.GPU_UTIL}{{pod!=""}})'

PodKey = tuple[str, str]  # (namespace, pod)


@dataclass(frozen=True)
class Candidate:
    team: str
    namespace: str
    workload: str
    pods: tuple[str, ...]
    reason: str

    def patch(self) -> dict[str, Any]:
        """A JSON merge patch for the Workload: deactivate, and say why on the object itself."""
        return {"metadata": {"annotations": {ANNOTATION: self.reason}}, "spec": {"active": False}}


def idle_and_gpu_pods(prom: Prometheus, at: float) -> tuple[set[PodKey], set[PodKey]]:
    """Pods with a firing idle alert, and every pod holding a GPU, at time `at`."""
    idle = {
        (labels["namespace"], labels["pod"]) for labels, _ in prom.instant(IDLE_ALERTS, at) if "pod" in labels
    }
    holding = {(labels["namespace"], labels["pod"]) for labels, _ in prom.instant(GPU_PODS, at)}
    return idle, holding


def _controller_uid(pod: dict[str, Any]) -> str | None:
    refs = pod["metadata"].get("ownerReferences", [])
    return next((r["uid"] for r in refs if r.get("controller")), None)


def _owner_uids(workload: dict[str, Any]) -> set[str]:
    meta = workload["metadata"]
    uids = {r["uid"] for r in meta.get("ownerReferences", [])}
    if uid := meta.get("labels", {}).get(JOB_UID_LABEL):
        uids.add(uid)
    return uids


def plan_reclaim(
    spec: ClusterSpec,
    idle: set[PodKey],
    holding: set[PodKey],
    pods: dict[str, list[dict[str, Any]]],
    workloads: dict[str, list[dict[str, Any]]],
) -> list[Candidate]:
    """Candidates per team namespace; `pods` and `workloads` are the items of `kubectl get -o json` per namespace."""
    out: list[Candidate] = []
    for team in spec.teams:
        ns = team.namespace or team.name
        idle_after = team.idle_after or spec.cluster.monitoring.idle_after
        by_controller: dict[str, list[str]] = {}
        for pod in pods.get(ns, []):
            if (uid := _controller_uid(pod)) is not None:
                by_controller.setdefault(uid, []).append(pod["metadata"]["name"])
        for wl in workloads.get(ns, []):
            if wl.get("spec", {}).get("active") is False:
                continue
            names = sorted({p for uid in _owner_uids(wl) for p in by_controller.get(uid, [])})
            gpu = [p for p in names if (ns, p) in holding]
            if gpu and all((ns, p) in idle for p in gpu):
                reason = (
                    f"GPUs idle: pods {', '.join(gpu)} held their GPUs below {m.IDLE_UTIL_PERCENT}% utilisation "
                    f"for more than {idle_after} (team {team.name}); deactivated by gpufleet reclaim. "
                    "Reactivate with spec.active: true."
                )
                out.append(Candidate(team.name, ns, wl["metadata"]["name"], tuple(gpu), reason))
    return out


def team_namespaces(spec: ClusterSpec) -> Iterable[str]:
    return [t.namespace or t.name for t in spec.teams]
