"""GPU sharing through the NVIDIA GPU operator: one device-plugin ConfigMap, one entry per sharing pool.

The device plugin on each node reads the entry named by the node's `nvidia.com/device-plugin.config` label
(`scheduler.labels.pool_node_labels` puts it there), falling back to `default` (whole GPUs). Time-sliced pools
rename their resource to `nvidia.com/gpu.shared` (renameByDefault) so Kueue quotas and pod requests never mix a
slice with a whole GPU; MIG pools use the mixed strategy, which exposes `nvidia.com/mig-<profile>`.

Every entry names the device-list strategy: CDI (the plugin hands the allocated devices to the runtime as CDI
device names, the same strategies the GPU operator sets when `cdi.enabled`), never `envvar`. With `envvar` a
container that sets `NVIDIA_VISIBLE_DEVICES=all` itself is given every GPU of the node by the container
toolkit, request or no request; with CDI only the devices the kubelet allocated are injected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.labels import (
    DEVICE_PLUGIN_CONFIGMAP,
    DEVICE_PLUGIN_DEFAULT_CONFIG,
    GPU_OPERATOR_NAMESPACE,
    GPU_RESOURCE,
    metadata,
)
from scheduler.model import PoolView
from scheduler.yamltext import dump_text

MIG_STRATEGY = "mixed"
DEVICE_LIST_STRATEGY = ["cdi-annotations", "cdi-cri"]  # k8s-device-plugin's CDI strategies (not "envvar")


def _flags(mig_strategy: str) -> dict[str, Any]:
    return {"migStrategy": mig_strategy, "plugin": {"deviceListStrategy": list(DEVICE_LIST_STRATEGY)}}


def device_plugin_config(pool: PoolView | None) -> dict[str, Any]:
    """The device plugin's config file (version v1) for one pool; None gives the whole-GPU default."""
    if pool is not None and pool.sharing == "timeSlicing":
        return {
            "version": "v1",
            "flags": _flags("none"),
            "sharing": {
                "timeSlicing": {
                    "renameByDefault": True,
                    "failRequestsGreaterThanOne": True,
                    "resources": [{"name": GPU_RESOURCE, "replicas": pool.time_slicing_replicas}],
                }
            },
        }
    if pool is not None and pool.sharing == "mig":
        return {"version": "v1", "flags": _flags(MIG_STRATEGY)}
    return {"version": "v1", "flags": _flags("none")}


def device_plugin_configmap(pools: Sequence[PoolView]) -> dict[str, Any]:
    data = {DEVICE_PLUGIN_DEFAULT_CONFIG: dump_text(device_plugin_config(None))}
    for pool in pools:
        if pool.sharing in ("timeSlicing", "mig"):  # a DRA-shared pool runs no device plugin
            data[pool.name] = dump_text(device_plugin_config(pool))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE),
        "data": data,
    }
