"""Speed and memory of the extender's ``prioritize``: the whole HTTP handler (JSON in, FGD, JSON out).

Usage: python benchmarks/extender_bench.py [--nodes 1000,10000] [--shapes 30] [--calls 300]

Targets: 1,000 nodes and 30 expected-workload shapes under 20 ms at p99 on one core (run it pinned, e.g.
``taskset -c 0``); 10,000 nodes within kube-scheduler's extender timeout (``httpTimeout`` 2 s as deployed,
5 s when unset). Memory: the peak Python allocation of the view, bounded by nodes x shapes (tracemalloc).

The cluster is half full of pods of the expected shapes (whole GPUs and replicas), so scores vary; the pods
asked about alternate between the shapes, and every call is a fresh request with all nodes as candidates
(``NodeNames``, as a nodeCacheCapable scheduler sends them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.extender.app import call, make_app  # noqa: E402
from scheduler.extender.resources import pod_request  # noqa: E402
from scheduler.extender.view import ExtenderView  # noqa: E402
from scheduler.sim.model import Workload  # noqa: E402
from scheduler.sim.policies.fgd_extender import node_object, pod_object  # noqa: E402

MODELS = ("A10", "T4", "V100M16", "V100M32", "G2")


def build(nodes: int, shapes: int, seed: int = 0) -> tuple[ExtenderView, list[dict], list[str]]:
    rng = np.random.default_rng(seed)
    table = []
    for s in range(shapes):
        k = 0 if s % 10 == 9 else (1 if s % 3 else int(rng.choice([1, 2, 4, 8])))
        share = k == 1 and s % 2 == 0
        table.append((int(rng.choice([1000, 4000, 8000, 16000])), int(rng.choice([4096, 16384])), k,
                      500 if share else (1000 if k else 0), ""))  # fmt: skip
    counts = rng.integers(1, 200, size=shapes)
    rows = [table[s] for s in range(shapes) for _ in range(int(counts[s]))]
    expected = Workload.build(*[[r[i] for r in rows] for i in range(5)])
    view = ExtenderView(expected=expected)
    names = [f"node-{i:05d}" for i in range(nodes)]
    view.load_nodes(
        node_object(n, 96000, 786432, int(rng.choice([2, 4, 8])), str(rng.choice(MODELS)), 2) for n in names
    )
    pods = [pod_object(f"bench-{s}", c, m, k, d, spec) for s, (c, m, k, d, spec) in enumerate(table)]
    for i in range(nodes * 2):  # fill about half of the cluster
        pod = pods[int(rng.integers(0, shapes))]
        view.pod_bound(f"run-{i}", names[int(rng.integers(0, nodes))], pod_request(pod))
    return view, pods, names


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="1000,10000")
    parser.add_argument("--shapes", type=int, default=30)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    print("| nodes | shapes | p50 ms | p99 ms | max ms | CPU p99 ms | view peak MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.nodes.split(",")):
        tracemalloc.start()
        view, pods, names = build(n, args.shapes)
        view._build()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        app = make_app(view)
        calls = args.calls if n <= 1000 else max(args.calls // 10, 20)
        times, cpu = [], []
        for i in range(calls):
            body = {"Pod": pods[i % len(pods)], "Nodes": None, "NodeNames": names}
            start, start_cpu = time.perf_counter(), time.process_time()
            status, prio = call(app, "prioritize", body)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
            assert status == 200 and len(prio) == n
        times.sort()
        cpu.sort()
        q = min(len(times) - 1, int(len(times) * 0.99))
        print(f"| {n} | {args.shapes} | {statistics.median(times):.2f} | {times[q]:.2f} | {times[-1]:.2f} | "
              f"{cpu[q]:.2f} | {peak / 2**20:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
