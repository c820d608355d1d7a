"""cluster-autoscaler alignment: the priority expander prefers reserved capacity, then on-demand, then spot.

When several node groups could host a pending pod, the autoscaler's `priority` expander picks the highest
number whose regexes match a node group name: capacity blocks are already paid for, spot is cheapest but can
vanish mid-run. Requires the autoscaler to run with `--expander=priority` (infra sets it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.labels import metadata
from scheduler.model import PoolView, SchedulingPolicy
from scheduler.yamltext import dump_text

CONFIGMAP = "cluster-autoscaler-priority-expander"  # the name the autoscaler reads, in its own namespace
PRIORITY = {"CAPACITY_BLOCK": 30, "ON_DEMAND": 20, "SPOT": 10}


def expander_priorities(pools: Sequence[PoolView]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for pool in pools:
        if pool.node_group:
            out.setdefault(PRIORITY[pool.capacity_type], []).append(pool.node_group)
    return dict(sorted(out.items(), reverse=True))


def priority_expander(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[dict[str, Any]]:
    """The ConfigMap, or nothing when no pool is autoscaled (existing clusters)."""
    priorities = expander_priorities(pools)
    if not priorities:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(CONFIGMAP, policy.autoscaler_namespace),
            "data": {"priorities": dump_text(priorities)},
        }
    ]
