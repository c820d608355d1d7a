"""The NVIDIA DRA driver's ResourceSlices for the twin's nodes of DRA-shared pools (`sharing: dra-shares`).

kwok runs no kubelet plugin, but kube-scheduler allocates claims from ResourceSlices alone, so publishing the
slices the driver's GPU kubelet plugin would publish is enough for the real scheduler to place shares and for
Kueue to count them (as kube-scheduler's own scheduler_perf does with its test driver). Pure: nodes in,
slices out; `twin.cluster` applies them after the nodes.

The shape is the driver's at kubernetes-sigs/dra-driver-nvidia-gpu commit 95932046 (2026-08-07; the
`ConsumableShares` gate, alpha since 0.5, is in no release tag yet):
- driver `gpu.nvidia.com` (cmd/gpu-kubelet-plugin/main.go, DriverName), one pool per node named after it;
- a GPU is device `gpu-<minor>` (deviceinfo.go, GpuInfo.CanonicalName) with the string attributes `type: gpu`,
  `uuid`, `productName` (NVML's name), `brand` and `resource.kubernetes.io/pciBusID` (partitions.go,
  PartDevAttributes; its version-valued attributes are left out, nothing here selects on them);
- with `--consumable-shares=<N>` (consumable_shares.go, applyConsumableShares) the device allows multiple
  allocations; `memory` (bytes, rounded down to 1Mi) takes requests 0..all in steps of 1Mi, default 0, and
  `shares` (N) takes 1..N in steps of 1, default 1.
"""

from __future__ import annotations

from typing import Any

from infra import catalog
from infra.spec import ClusterSpec
from scheduler.dra import API, DRIVER, MEMORY, SHARES
from twin.nodes import TwinNode


def _device(node: str, minor: int, product: str, memory_mib: int, shares: int) -> dict[str, Any]:
    memory = f"{memory_mib}Mi"
    return {
        "name": f"gpu-{minor}",
        "allowMultipleAllocations": True,
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{node}-{minor}"},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{minor + 1:02x}:00.0"},
        },
        "capacity": {
            MEMORY: {
                "value": memory,
                "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": memory, "step": "1Mi"}},
            },
            SHARES: {
                "value": str(shares),
                "requestPolicy": {
                    "default": "1",
                    "validRange": {"min": "1", "max": str(shares), "step": "1"},
                },
            },
        },
    }


def node_slice(node: str, gpus: int, product: str, memory_mib: int, shares: int) -> dict[str, Any]:
    """The one ResourceSlice of a node whose ``gpus`` GPUs are each a device of ``shares`` shares."""
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [_device(node, i, product, memory_mib, shares) for i in range(gpus)],
        },
    }


def resource_slices(spec: ClusterSpec, nodes: list[TwinNode]) -> list[dict[str, Any]]:
    """One ResourceSlice per node of a DRA-shared pool, every GPU of the node a shareable device."""
    pools = {p.name: p for p in spec.node_pools if p.sharing.dra_shares}
    out = []
    for node in nodes:
        pool = pools.get(node.pool)
        if pool is None or pool.sharing.dra_shares is None:
            continue
        model = catalog.GPU_MODELS[pool.gpu_model or ""]
        shares = pool.sharing.dra_shares.shares
        out.append(
            node_slice(node.name, pool.gpus_per_node or 0, model.product, model.memory_gib * 1024, shares)
        )
    return out
