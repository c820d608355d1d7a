"""A running cluster's GPU work as a trace the simulators read: what happened, replayed against what could.

A team that wants to know whether another placement, more quota or another pool would have served it better
needs its own workload, not the Alibaba trace. Kueue keeps a Workload per job until the job is deleted, with
the times that matter: created (the job arrived), `Admitted` (it got quota and its pods were released) and
`Finished` (kueue.x-k8s.io/v1beta2 Workload conditions, Kueue v0.19.2 `apis/kueue/v1beta2/workload_types.go`:
`WorkloadAdmitted`, `WorkloadFinished`). Each finished Workload of a GPU pool becomes one row of the generic
timed format (:mod:`scheduler.sim.timed_traces`): arrival after the first one, duration from admission to
finish, the pod's requests as kube-scheduler sums them (containers, or the largest init container when larger:
`pkg/scheduler/framework/types.go` `calculateResource`), the pod count as a gang, its team, LocalQueue and
priority class. The pool it ran on decides the GPU columns: whole GPUs as `num_gpu`; a time-sliced replica or a
MIG slice as its fraction of one GPU (`gpu_milli`, the stack's replicas or instances per GPU), the way
`invoke simulate` routes shares. `gpu_spec` is the pool's GPU model, so `--stack` routes the row back to
that pool's kind.

The GPU nodes become the openb node list (`sn, cpu_milli, memory_mib, gpu, model`) from their allocatable
resources, their GPUs counted in whole GPUs. What is not written is counted with its reason: Workloads still
running or waiting (no duration yet), evicted and never finished, asking no GPU, or on a pool the stack does
not have.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils import parse_quantity

from scheduler.explain.durations import parse_time
from scheduler.explain.order import condition
from scheduler.fgd.model import MILLI
from scheduler.labels import POOL_LABEL
from scheduler.model import PoolView
from scheduler.resources import gpu_resource, units_per_gpu
from scheduler.sim.traces import NODE_COLUMNS

JOB_COLUMNS = ("name", "arrival", "duration", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec",
               "pods", "team", "queue", "priority")  # fmt: skip


@dataclass(frozen=True)
class ClusterTrace:
    """The rows of both files and how many Workloads were left out, by reason."""

    nodes: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    skipped: Counter[str] = field(default_factory=Counter)

    def nodes_csv(self) -> str:
        return _csv(NODE_COLUMNS, self.nodes)

    def jobs_csv(self) -> str:
        return _csv(JOB_COLUMNS, self.jobs)


def _csv(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def pod_requests(spec: Mapping[str, Any]) -> dict[str, float]:
    """A pod's requests as kube-scheduler counts them: the containers' sum, each resource raised to the largest
    init container's (a container without requests but with limits requests its limits)."""

    def of(container: Mapping[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        asked = resources.get("requests") or resources.get("limits") or {}
        return {str(k): float(parse_quantity(str(v))) for k, v in asked.items()}

    total: dict[str, float] = {}
    for container in spec.get("containers", []) or []:
        for name, value in of(container).items():
            total[name] = total.get(name, 0.0) + value
    for container in spec.get("initContainers", []) or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, 0.0), value)
    return total


def gpu_columns(pool: PoolView, units: float) -> tuple[int, int]:
    """(num_gpu, gpu_milli) of a pod asking `units` of its pool's GPU resource."""
    per_gpu = units_per_gpu(pool)
    if per_gpu == 1:
        return int(units), MILLI
    if units >= per_gpu:  # whole GPUs' worth of shares
        return int(units // per_gpu), MILLI
    return 1, max(1, round(units * MILLI / per_gpu))


def node_rows(nodes: Sequence[Mapping[str, Any]], pools: Mapping[str, PoolView]) -> list[dict[str, Any]]:
    """The nodes of the stack's GPU pools, as openb node rows (GPUs in whole GPUs)."""
    rows = []
    for node in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        pool = pools.get(str((node["metadata"].get("labels") or {}).get(POOL_LABEL, "")))
        if pool is None:
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        units = float(parse_quantity(str(allocatable.get(gpu_resource(pool), 0))))
        rows.append({
            "sn": node["metadata"]["name"],
            "cpu_milli": int(float(parse_quantity(str(allocatable.get("cpu", 0)))) * MILLI),
            "memory_mib": int(float(parse_quantity(str(allocatable.get("memory", 0)))) // 2**20),
            "gpu": int(units // units_per_gpu(pool)) if units else pool.gpus_per_node,
            "model": pool.gpu_model or pool.name,
        })  # fmt: skip
    return rows


def workload_priority_class(spec: Mapping[str, Any]) -> str:
    """The WorkloadPriorityClass a Workload was given ("" for none, or a pod PriorityClass): v1beta2's
    `priorityClassRef` (group kueue.x-k8s.io, kind WorkloadPriorityClass), v1beta1's `priorityClassName` with
    `priorityClassSource: kueue.x-k8s.io/workloadpriorityclass`."""
    ref = spec.get("priorityClassRef") or {}
    if ref:
        return str(ref.get("name", "")) if ref.get("kind") == "WorkloadPriorityClass" else ""
    if spec.get("priorityClassSource") == "kueue.x-k8s.io/workloadpriorityclass":
        return str(spec.get("priorityClassName", ""))
    return ""


def _seconds_between(start: Mapping[str, Any] | None, end: Mapping[str, Any] | None) -> float | None:
    if not (start and end and start.get("lastTransitionTime") and end.get("lastTransitionTime")):
        return None
    return (
        parse_time(str(end["lastTransitionTime"])) - parse_time(str(start["lastTransitionTime"]))
    ).total_seconds()


def _job_row(
    workload: Mapping[str, Any], pools: Mapping[str, PoolView], teams: Mapping[str, str]
) -> dict[str, Any] | str:
    """One finished Workload as a trace row, or the reason it is left out."""
    finished = condition(workload, "Finished")
    if not finished or finished.get("status") != "True":
        return "not finished (running, waiting or evicted)"
    admitted = condition(workload, "Admitted")
    ran = _seconds_between(admitted, finished)
    if ran is None:
        return "finished without being admitted (rejected or deactivated)"
    spec = workload.get("spec") or {}
    podsets = spec.get("podSets") or []
    assignments = ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
    asked = [pod_requests((ps.get("template") or {}).get("spec") or {}) for ps in podsets]
    for index, (podset, requests) in enumerate(zip(podsets, asked, strict=True)):
        flavors = (assignments[index].get("flavors") or {}) if index < len(assignments) else {}
        for pool in pools.values():
            resource = gpu_resource(pool)
            if requests.get(resource) and flavors.get(resource) == pool.name:
                num_gpu, gpu_milli = gpu_columns(pool, requests[resource])
                namespace = str(workload["metadata"].get("namespace", ""))
                return {
                    "name": workload["metadata"]["name"],
                    "arrival": parse_time(str(workload["metadata"]["creationTimestamp"])).timestamp(),
                    "duration": round(max(ran, 0.0), 3),
                    "cpu_milli": int(requests.get("cpu", 0.0) * MILLI),
                    "memory_mib": int(requests.get("memory", 0.0) // 2**20),
                    "num_gpu": num_gpu,
                    "gpu_milli": gpu_milli,
                    "gpu_spec": pool.gpu_model or pool.name,
                    "pods": int(podset.get("count", 1)),
                    "team": teams.get(namespace, ""),
                    "queue": str(spec.get("queueName", "")),
                    "priority": workload_priority_class(spec),
                }
    if any(
        k.startswith("nvidia.com/") or k == "gpufleet.io/gpu-shares" for requests in asked for k in requests
    ):
        return "ran on a GPU resource or flavor the stack has no pool for"
    return "asks no GPU"


def cluster_trace(
    workloads: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    pools: Sequence[PoolView],
    teams: Mapping[str, str],
) -> ClusterTrace:
    """The finished GPU Workloads and the GPU nodes as a timed trace and a node list (see the module docstring);
    `teams` names the team of each team namespace. Arrivals count from the first finished Workload's creation,
    in the order the jobs arrived."""
    by_name = {p.name: p for p in pools}
    jobs: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    for workload in workloads:
        row = _job_row(workload, by_name, teams)
        if isinstance(row, str):
            skipped[row] += 1
        else:
            jobs.append(row)
    jobs.sort(key=lambda r: (r["arrival"], r["name"]))
    first = jobs[0]["arrival"] if jobs else 0.0
    for row in jobs:
        row["arrival"] = round(row["arrival"] - first, 3)
    return ClusterTrace(node_rows(nodes, by_name), jobs, skipped)


__all__ = [
    "JOB_COLUMNS",
    "ClusterTrace",
    "cluster_trace",
    "gpu_columns",
    "node_rows",
    "pod_requests",
    "workload_priority_class",
]
