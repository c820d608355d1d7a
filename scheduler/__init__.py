"""GPU-aware scheduling: compile a team policy into Kueue, namespace, placement, sharing and autoscaler objects.

The public API is imported lazily so `import scheduler` stays cheap and never pulls in pulumi
(`scheduler.component` is the only module that imports it) or the simulator (`scheduler.sim`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.compiler import compile, is_custom_resource
    from scheduler.errors import SchedulerConfigError
    from scheduler.kueue_config import kueue_values, manager_config
    from scheduler.labels import pool_node_labels
    from scheduler.manifests import render
    from scheduler.model import PoolView, PriorityClassView, SchedulingPolicy, TeamPolicy
    from scheduler.placement import kube_scheduler_config

_EXPORTS = {
    "compile": "scheduler.compiler",
    "is_custom_resource": "scheduler.compiler",
    "render": "scheduler.manifests",
    "SchedulerConfigError": "scheduler.errors",
    "kueue_values": "scheduler.kueue_config",
    "manager_config": "scheduler.kueue_config",
    "pool_node_labels": "scheduler.labels",
    "PoolView": "scheduler.model",
    "PriorityClassView": "scheduler.model",
    "SchedulingPolicy": "scheduler.model",
    "TeamPolicy": "scheduler.model",
    "kube_scheduler_config": "scheduler.placement",
}
__all__ = [
    "PoolView",
    "PriorityClassView",
    "SchedulerConfigError",
    "SchedulingPolicy",
    "TeamPolicy",
    "compile",
    "is_custom_resource",
    "kube_scheduler_config",
    "kueue_values",
    "manager_config",
    "pool_node_labels",
    "render",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'scheduler' has no attribute {name!r}")
