"""Draining pools before they roll, without evicting a running job: pure data for `invoke drain`.

EKS drains a node group's nodes with the eviction API and a training pod has no disruption budget, so rolling a
pool with jobs on it kills them. Instead, the ClusterQueues that can admit work to the pools are stopped with
`stopPolicy: Hold`: Kueue reserves no new quota in them and lets admitted workloads run (kueue v0.19.2, the
ClusterQueue CRD's `stopPolicy`: "Hold - Admitted workloads will run to completion and Reserving workloads will
cancel the reservation"; `HoldAndDrain` would evict them). Once no admitted workload
holds quota on the pools, they roll with nothing to evict. A stated bound caps the wait: past it, nothing is
evicted; the command says which workloads still run, so their owners checkpoint and end them, or the wait is
repeated.

A ClusterQueue has one stop policy for all its flavors, so holding a pool's queues also holds their teams'
other pools until `invoke drain --release`. The Pulumi program does not manage `stopPolicy`, so a deploy in
between leaves the hold in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.rollout import running_by_pool

HOLD = "Hold"
HOLD_PATCH: dict[str, Any] = {"spec": {"stopPolicy": HOLD}}
RELEASE_PATCH: dict[str, Any] = {"spec": {"stopPolicy": "None"}}


@dataclass(frozen=True)
class DrainPlan:
    pools: tuple[str, ...]
    hold: tuple[str, ...]  # ClusterQueues to stop
    running: tuple[str, ...]  # namespace/name of the admitted workloads on the pools now


def queues_of(pools: set[str], cluster_queues: list[dict[str, Any]]) -> list[str]:
    """The ClusterQueues with a flavor of one of `pools` (flavors are named after their pools)."""
    out = []
    for cq in cluster_queues:
        flavors = {
            f["name"]
            for group in cq.get("spec", {}).get("resourceGroups", [])
            for f in group.get("flavors", [])
        }
        if flavors & pools:
            out.append(cq["metadata"]["name"])
    return sorted(out)


def running_on(pools: set[str], workloads: list[dict[str, Any]]) -> list[str]:
    """The admitted, unfinished workloads that hold quota on any of `pools`."""
    by_pool = running_by_pool(workloads)
    return sorted({w for pool in pools for w in by_pool.get(pool, [])})


def plan_drain(
    pools: list[str], cluster_queues: list[dict[str, Any]], workloads: list[dict[str, Any]]
) -> DrainPlan:
    wanted = set(pools)
    return DrainPlan(
        tuple(pools), tuple(queues_of(wanted, cluster_queues)), tuple(running_on(wanted, workloads))
    )


def held(cluster_queue: dict[str, Any]) -> bool:
    return bool(cluster_queue.get("spec", {}).get("stopPolicy") == HOLD)
