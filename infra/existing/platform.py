"""The `existing` platform: the GPU stack on a cluster we do not create, reached through its kubeconfig.

No cloud resource is created here. The hosts were prepared by Ansible (`invoke metal`), which is why the GPU
operator leaves the driver and toolkit alone unless the spec says `driverManagedBy: operator`. Each host's node
gets its pool's labels (server-side apply of the labels only, so nothing else on the node is touched): the
same labels the Kueue flavors select on and the device plugin reads its sharing config from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.gpu_stack.component import GpuStack
from infra.scheduling import pool_view
from infra.spec import ClusterSpec

ROOT = Path(__file__).resolve().parents[2]


def kubeconfig_path(path: str) -> str:
    """`~` expanded; a relative path is relative to the project (where the stack files are)."""
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else ROOT / p)


class ExistingCluster(pulumi.ComponentResource):
    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:existing:Cluster", name, None, opts)
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=kubeconfig_path(spec.cluster.kubeconfig or ""),
            context=spec.cluster.kubeconfig_context,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.labels = [
            k8s.core.v1.NodePatch(
                f"{name}-{host}",
                metadata={"name": host, "labels": pool_view(spec, pool).labels},
                opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
            )
            for pool in spec.node_pools
            for host in pool.hosts or []
        ]
        self.stack = GpuStack(name, spec, self.provider, self.labels, pulumi.ResourceOptions(parent=self))
        operator = self.stack.gpu_operator
        self.register_outputs({"gpu_operator": operator.status if operator else "existing"})


def build_existing(spec: ClusterSpec) -> dict[str, Any]:
    ExistingCluster(spec.cluster.name, spec)
    return {
        "cluster_name": spec.cluster.name,
        "platform": "existing",
        "kubeconfig_context": spec.cluster.kubeconfig_context or "",
        "node_pools": [p.name for p in spec.node_pools],
    }
