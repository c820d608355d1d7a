"""GPU self-healing on existing clusters: NVIDIA NVSentinel, pinned in the versions recipe.

Why NVSentinel: it is NVIDIA's maintained GPU fault pipeline. Its GPU health monitor reads DCGM health (XID
classes, ECC, fallen-off-the-bus, NVLink, thermal) from the GPU operator's standalone DCGM, fault-quarantine
cordons and taints the node, node-drainer evicts its pods when enabled, and a later healthy event lifts the
quarantine (uncordon, untaint). node-problem-detector would need DCGM checks written and kept by us.
On EKS the node monitoring agent and node auto repair do this job (infra.aws), so nothing is installed there.

Pods never schedule onto a quarantined node: the flavors' tolerations name only the GPU taint and the pools'
own taints, never the quarantine taint or a key-less `Exists` (tests/monitoring/test_health.py). Kueue itself
admits on quota, not nodes, so a quarantined node's GPUs still count as free quota: an admitted workload can
sit Pending on it until `waitForPodsReady` evicts and requeues it (docs/operations.md, Self-healing).

Values keys: NVSentinel's configuration reference (docs.nvidia.com/nvsentinel, Configuration, v1.26-v1.29):
`global.gpuHealthMonitor.enabled`, `global.faultQuarantine.enabled`, `global.nodeDrainer.enabled`. Fault
quarantine needs NVSentinel's datastore, which the chart deploys by default (an in-cluster MongoDB; "External
Datastore" in the same documentation), so we leave it at its default (the Bitnami backend). That datastore
needs cert-manager, a default StorageClass and amd64 nodes; `infra.preflight.nvsentinel` checks them on the
cluster before deploy, since a missing one only shows as the atomic release timing out and rolling back.
"""

from __future__ import annotations

from typing import Any

from infra.spec import ClusterSpec

NAMESPACE = "nvsentinel"
RELEASE = "nvsentinel"


def installs_nvsentinel(spec: ClusterSpec) -> bool:
    return spec.platform == "existing" and spec.cluster.monitoring.self_healing != "off"


def nvsentinel_values(spec: ClusterSpec) -> dict[str, Any]:
    drain = spec.cluster.monitoring.self_healing == "drain"
    return {
        "global": {
            "gpuHealthMonitor": {"enabled": True},
            "faultQuarantine": {"enabled": True},
            "nodeDrainer": {"enabled": drain},
        }
    }


def gpu_operator_dcgm_values(spec: ClusterSpec) -> dict[str, Any]:
    """NVSentinel connects to DCGM as a service: the GPU operator's standalone DCGM (`dcgm.enabled`), which it
    otherwise embeds in dcgm-exporter (NVSentinel README, Prerequisites)."""
    return {"enabled": True} if installs_nvsentinel(spec) else {}
