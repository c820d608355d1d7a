"""Kueue's order of the workloads waiting in one ClusterQueue, and each one's place in it.

Kueue (v0.19.2) pops a ClusterQueue's pending workloads by effective priority, higher first, then by the queue
order timestamp, earlier first, then by UID (pkg/cache/queue/cluster_queue.go:1061-1091); the timestamp is the
creation time, or the time of an eviction by an admission check or the waitForPodsReady timeout, after which a
workload goes to the back (pkg/workload/workload.go:1148-1167). Each team has its own ClusterQueue, so the
team's own pending Workloads are the whole line: a member who may read only their namespace still sees their
true position. Where Kueue's visibility API is served, its positions are taken instead (`pending_positions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

EVICTED_TO_THE_BACK = ("AdmissionCheck", "PodsReadyTimeout")


def condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in workload.get("status", {}).get("conditions", []) or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def is_true(workload: Mapping[str, Any], kind: str) -> bool:
    found = condition(workload, kind)
    return bool(found) and found.get("status") == "True"  # type: ignore[union-attr]


def is_pending(workload: Mapping[str, Any]) -> bool:
    """Waiting for quota: no reservation, not finished, not deactivated."""
    active = workload.get("spec", {}).get("active", True) is not False
    return active and not is_true(workload, "QuotaReserved") and not is_true(workload, "Finished")


def priority(workload: Mapping[str, Any]) -> int:
    return int(workload.get("spec", {}).get("priority") or 0)


def queue_timestamp(workload: Mapping[str, Any]) -> str:
    evicted = condition(workload, "Evicted")
    if evicted and evicted.get("status") == "True" and evicted.get("reason") in EVICTED_TO_THE_BACK:
        return str(evicted.get("lastTransitionTime", ""))
    return str(workload["metadata"].get("creationTimestamp", ""))


def job_of(workload: Mapping[str, Any]) -> str:
    """`kind/name` of the job that owns the Workload (what the member submitted), else the Workload's name."""
    for ref in workload["metadata"].get("ownerReferences", []) or []:
        if ref.get("controller"):
            return f"{str(ref['kind']).lower()}/{ref['name']}"
    return str(workload["metadata"]["name"])


def kueue_order(workloads: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pending workloads, first to be tried first (RFC 3339 UTC timestamps sort as text)."""
    pending = [w for w in workloads if is_pending(w)]
    return sorted(
        pending, key=lambda w: (-priority(w), queue_timestamp(w), str(w["metadata"].get("uid", "")))
    )


def positions(workloads: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Each pending workload's place in line, 0 first, by name."""
    return {str(w["metadata"]["name"]): i for i, w in enumerate(kueue_order(workloads))}


def pending_positions(visibility: Mapping[str, Any]) -> dict[str, int]:
    """Positions from Kueue's visibility API (`PendingWorkloadsSummary`, apis/visibility/v1beta2/types.go:75-79),
    in the ClusterQueue, by workload name."""
    return {str(item["metadata"]["name"]): int(item.get("positionInClusterQueue", 0))
            for item in visibility.get("items", []) or []}  # fmt: skip
