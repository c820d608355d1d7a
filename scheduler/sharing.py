"""GPU sharing through the NVIDIA GPU operator: one device-plugin ConfigMap, one entry per sharing pool.

The device plugin on each node reads the entry named by the node's `nvidia.com/device-plugin.config` label
(`scheduler.labels.pool_node_labels` puts it there), falling back to `default` (whole GPUs). Time-sliced pools
rename their resource to `nvidia.com/gpu.shared` (renameByDefault) so Kueue quotas and pod requests never mix a
slice with a whole GPU; MIG pools use the mixed strategy, which exposes `nvidia.com/mig-<profile>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from scheduler.labels import (
    DEVICE_PLUGIN_CONFIGMAP,
    DEVICE_PLUGIN_DEFAULT_CONFIG,
    GPU_OPERATOR_NAMESPACE,
    GPU_RESOURCE,
    metadata,
)
from scheduler.model import PoolView

MIG_STRATEGY = "mixed"


def device_plugin_config(pool: PoolView | None) -> dict[str, Any]:
    """The device plugin's config file (version v1) for one pool; None gives the whole-GPU default."""
    if pool is not None and pool.sharing == "timeSlicing":
        return {
            "version": "v1",
            "flags": {"migStrategy": "none"},
            "sharing": {
                "timeSlicing": {
                    "renameByDefault": True,
                    "failRequestsGreaterThanOne": True,
                    "resources": [{"name": GPU_RESOURCE, "replicas": pool.time_slicing_replicas}],
                }
            },
        }
    if pool is not None and pool.sharing == "mig":
        return {"version": "v1", "flags": {"migStrategy": MIG_STRATEGY}}
    return {"version": "v1", "flags": {"migStrategy": "none"}}


def device_plugin_configmap(pools: Sequence[PoolView]) -> dict[str, Any]:
    data = {DEVICE_PLUGIN_DEFAULT_CONFIG: yaml.safe_dump(device_plugin_config(None), sort_keys=False)}
    for pool in pools:
        if pool.sharing != "exclusive":
            data[pool.name] = yaml.safe_dump(device_plugin_config(pool), sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE),
        "data": data,
    }
