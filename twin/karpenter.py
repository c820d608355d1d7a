"""Karpenter on a Karpenter stack's twin: the core's kwok provider at the stack's release, as a local process.

Configured the way the chart configures the controller, by environment (sigs.k8s.io/karpenter@v1.14.1
pkg/operator/options/options.go:113-134 and kwok/options/options.go:42; each flag falls back to the variable):
the twin's admin kubeconfig (`KUBECONFIG`, read by controller-runtime's `GetConfigOrDie`), no leader election
(one replica), metrics and health probes on ports the twin picks (the operator binds `:<port>`, every address of
the twin's own network namespace, which has loopback only: pkg/operator/operator.go:181-183), the stack's
feature gates and the instance types file (`twin.karpenter_objects`).
"""

from __future__ import annotations

import json
from pathlib import Path

from infra.spec import ClusterSpec
from twin.karpenter_objects import feature_gates, instance_types
from twin.processes import Process, Supervisor, free_port, http_ok, wait_until

READY_TIMEOUT_S = 120


def karpenter_environment(
    spec: ClusterSpec, kubeconfig: Path, types_file: Path, metrics: int, health: int
) -> dict[str, str]:
    return {
        "KUBECONFIG": str(kubeconfig),
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(metrics),
        "HEALTH_PROBE_PORT": str(health),
        "INSTANCE_TYPES_FILE_PATH": str(types_file),
        "FEATURE_GATES": feature_gates(spec),
        "LOG_LEVEL": "debug",
    }


def start_karpenter(
    program: Path, spec: ClusterSpec, kubeconfig: Path, sup: Supervisor, folder: Path
) -> Process:
    """Write the instance types, start the controller, and wait until its /readyz passes (caches synced, the
    NodePool and NodeClaim kinds served)."""
    types_file = folder / "karpenter-instance-types.json"
    types_file.write_text(json.dumps(instance_types(spec), indent=1) + "\n")
    metrics, health = free_port(), free_port()
    env = karpenter_environment(spec, kubeconfig, types_file, metrics, health)
    proc = sup.start("karpenter", [program], env=env)
    wait_until(
        lambda: http_ok(f"http://127.0.0.1:{health}/readyz"), "Karpenter /readyz", proc, READY_TIMEOUT_S
    )
    return proc
