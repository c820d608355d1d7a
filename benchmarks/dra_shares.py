"""FGD against MostAllocated where fragmentation-aware placement can pay: GPU shares allocated through DRA.

The openb cluster (Alibaba GPU trace v2023, every GPU node) with every GPU a DRA device of 8 shares: a pod's
fractional ask becomes the fewest shares that cover it (a claim names a share count), a whole-GPU pod claims
whole devices. kube-scheduler chooses the node (by the policy's score; FGD's through the extender) and its DRA
allocator the GPU: the node's first device with room (``first-fit``, :func:`scheduler.fgd.frag.first_fit_gpu`).
For reference, FGD also runs with the paper's rule, where the policy picks the GPU itself (``policy``), which
no extender can do. ``Random`` is the null model: any policy worth deploying must beat it.

Reports the unallocated GPU % at arrived = 100 (the paper's headline number), mean and standard deviation over
seeds, per workload and policy; ``--json`` writes the runs.

Usage: python benchmarks/dra_shares.py [--workloads gpushare100,default] [--seeds 42,...] [--processes 2]
(the traces from GPUFLEET_SHARED, ../shared, or fetched: benchmarks/reference_data.py). Measured in
benchmarks/dra_shares.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from statistics import mean, pstdev

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.fgd.model import MILLI, Workload  # noqa: E402
from scheduler.sim import read_nodes, read_pods, run_many  # noqa: E402

SHARES = 8  # per GPU: the NVIDIA driver's --consumable-shares=8, gpufleet's default
RUNS = (("FGD", "first-fit"), ("MostAllocated", "first-fit"), ("Random", "first-fit"), ("FGD", "policy"))


def in_shares(pods: Workload, shares: int = SHARES) -> Workload:
    """Fractional asks rounded up to whole shares (1000 / shares milli each); whole GPUs unchanged."""
    step = MILLI // shares
    frac = (pods.gpu_milli > 0) & (pods.gpu_milli < MILLI)
    milli = np.where(frac, -(-pods.gpu_milli // step) * step, pods.gpu_milli)
    return replace(pods, gpu_milli=np.minimum(milli, MILLI))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="gpushare100,default")
    parser.add_argument("--seeds", default="42,43,44,45,46")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    from benchmarks.fgd_reproduction import shared_dir

    traces = shared_dir() / "traces" / "alibaba-gpu-v2023"
    seeds = [int(s) for s in args.seeds.split(",")]
    cluster = read_nodes(str(traces / "openb_node_list_gpu_node.csv"))
    rows, runs = [], []
    for name in args.workloads.split(","):
        pods = in_shares(read_pods(str(traces / f"openb_pod_list_{name}.csv")))
        for policy, rule in RUNS:
            results = run_many(cluster, pods, [policy], seeds, processes=args.processes, share_rule=rule)  # type: ignore[arg-type]
            values = [r.unallocated(100) for r in results]
            rows.append((name, policy, rule, mean(values), pstdev(values), min(values), max(values)))
            runs += [{"workload": name, "rule": rule, **r.to_dict()} for r in results]
            print(f"{name:12} {policy:14} {rule:9} {mean(values):6.2f} ± {pstdev(values):4.2f} "
                  f"[{min(values):.2f}, {max(values):.2f}]", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
