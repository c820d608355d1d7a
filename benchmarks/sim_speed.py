"""Speed and memory of one simulator run per policy (one workload, one seed), median of repeated runs.

Usage: python benchmarks/sim_speed.py [--workload default] [--repeat 3] [--policies FGD,BestFit]

Targets: FGD <= 2 s and every other policy <= 1 s median per run on a 2-core machine, peak memory
< 1 GB. Prints the median and fastest wall time and the median process-CPU time; on a shared machine the
spread between runs shows how much other load there was.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.sim import ALL_POLICIES, read_nodes, read_pods, run_one  # noqa: E402


def shared_dir() -> Path:
    """The reference data: GPUFLEET_SHARED, ../shared, or the pinned files fetched and verified into a cache."""
    from benchmarks.reference_data import ensure

    return ensure()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", default="default")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", default=",".join(ALL_POLICIES))
    args = parser.parse_args()

    trace = shared_dir() / "traces" / "alibaba-gpu-v2023"
    start = time.perf_counter()
    cluster = read_nodes(trace / "openb_node_list_gpu_node.csv")
    workload = read_pods(trace / f"openb_pod_list_{args.workload}.csv")
    print(f"read {cluster.size} nodes, {workload.size} pods in {time.perf_counter() - start:.3f} s")
    print(
        f"{'policy':<15} {'pods':>6} {'wall med s':>10} {'wall min s':>10} {'cpu med s':>10}  target   runs"
    )
    for policy in args.policies.split(","):
        walls, cpus, pods = [], [], 0
        for _ in range(args.repeat):
            t_wall, t_cpu = time.perf_counter(), time.process_time()
            result = run_one(cluster, workload, policy, args.seed)
            walls.append(time.perf_counter() - t_wall)
            cpus.append(time.process_time() - t_cpu)
            pods = result.pods
        target = 2.0 if policy == "FGD" else 1.0
        runs = " ".join(f"{w:.2f}" for w in walls)
        print(
            f"{policy:<15} {pods:>6} {statistics.median(walls):>10.3f} {min(walls):>10.3f} "
            f"{statistics.median(cpus):>10.3f}  <= {target:.0f} s   {runs}"
        )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak_mib:.0f} MiB (target < 1024 MiB)")


if __name__ == "__main__":
    main()
