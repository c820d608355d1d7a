"""Speed of the extender's ``prioritize`` for a pod that claims GPU shares through DRA (``--dra-shares``).

Usage: python benchmarks/extender_shares_bench.py [--nodes 100,1000] [--calls 30] (pin it: ``taskset -c 0``)

Each node has 8 GPUs published as the NVIDIA driver's share devices (8 shares each, the shape of twin.dra), a
random number of each GPU's shares taken by allocated claims; every call is a new pod with a new pending
2-share claim (a watch event, as in a live cluster, where each pod's claim arrives just before its pod), all
nodes its candidates. Timed: the view's prioritize from the parsed request to the scores (the free shares
rebuilt after the claim event, the target, FGD over every node, the assumption).

Measured 2026-12-05, pinned to one core of the shared 2-core machine at load 5-6, 30 calls:

| nodes | p50 ms | max ms |
|---:|---:|---:|
| 100 | 3.1 | 4.2 |
| 1000 | 32.7 | 54.8 |

Within the scheduler's 2 s extender timeout, but about 30 times the whole-GPU path's cost at 1,000 nodes
(benchmarks/extender_bench.py): the share view rebuilds the nodes' free shares and FGD's per-node state on every
claim change instead of updating the one node that changed. Before the slices and claims were parsed once per
watch event (the first version parsed every object on every call): 214 ms p50 at 1,000 nodes, in an earlier form of
this harness.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.dra import DRIVER, SHARES, claim_template, template_name  # noqa: E402
from scheduler.extender import wire  # noqa: E402
from scheduler.extender.view import ExtenderView  # noqa: E402
from scheduler.extender.watch import replace_claims, replace_nodes, replace_pods, replace_slices  # noqa: E402

GPUS, PER_GPU = 8, 8


def device(minor: int) -> dict[str, Any]:
    """A share device as twin.dra publishes it (its capacities; attributes do not enter the score)."""
    return {"name": f"gpu-{minor}", "allowMultipleAllocations": True,
            "capacity": {SHARES: {"value": str(PER_GPU)}, "memory": {"value": "46068Mi"}}}  # fmt: skip


def cluster(n: int, rng: np.random.Generator) -> tuple[list[Any], list[Any], list[Any]]:
    names = [f"node-{i:05d}" for i in range(n)]
    nodes = [{"metadata": {"name": m, "labels": {}},
              "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}} for m in names]  # fmt: skip
    slices = [{"metadata": {"name": f"{m}-{DRIVER}"}, "spec": {"driver": DRIVER, "nodeName": m,
               "pool": {"name": m, "generation": 1, "resourceSliceCount": 1},
               "devices": [device(g) for g in range(GPUS)]}} for m in names]  # fmt: skip
    claims = []
    for m in names:
        for g in range(GPUS):
            if used := int(rng.integers(0, PER_GPU + 1)):
                result = {
                    "driver": DRIVER,
                    "pool": m,
                    "device": f"gpu-{g}",
                    "consumedCapacity": {SHARES: str(used)},
                }
                claims.append({"metadata": {"name": f"{m}-{g}", "namespace": "team"},
                               "spec": claim_template("team", 1)["spec"]["spec"],
                               "status": {"allocation": {"devices": {"results": [result]}}}})  # fmt: skip
    return nodes, slices, claims


def share_pod(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"p{i}", "namespace": "team", "uid": f"p{i}"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name(2)}],
                     "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"p{i}-gpu"}]}}  # fmt: skip


def measure(n: int, calls: int) -> tuple[float, float]:
    nodes, slices, claims = cluster(n, np.random.default_rng(0))
    view = ExtenderView(dra_shares=True)
    replace_nodes(view, nodes)
    replace_pods(view, [])
    replace_slices(view, slices)
    replace_claims(view, claims)
    names = [node["metadata"]["name"] for node in nodes]
    times = []
    for i in range(calls):
        claim = {
            "metadata": {"name": f"p{i}-gpu", "namespace": "team"},
            "spec": claim_template("team", 2)["spec"]["spec"],
        }
        view.claim_event("ADDED", claim)
        args = wire.parse_args({"pod": share_pod(i), "nodenames": names})
        start = time.perf_counter()
        view.prioritize(args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, max(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="100,1000")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args(argv)
    print("| nodes | p50 ms | max ms |\n|---:|---:|---:|")
    for n in (int(x) for x in args.nodes.split(",")):
        p50, worst = measure(n, args.calls)
        print(f"| {n} | {p50:.1f} | {worst:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
