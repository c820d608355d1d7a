"""What a poll of a twin costs: `kubectl get ... -o json` as a process against the same read answered by
`twin.api_reads` on a kept-alive connection, in the machine's CPU seconds (every process: the reader, the
twin's forwarder, the API server, etcd) and wall seconds per read.

Against a running twin (`invoke twin --stack metal &`, then its kubeconfig and kubectl from the lines it
prints), from the machine's loopback as the tests read it:

    python benchmarks/api_reads.py --kubeconfig KUBECONFIG --kubectl KUBECTL [--reads 200]

The machine's CPU time is read from /proc/stat (user + nice + system + irq + softirq), so run it on an
otherwise quiet machine; results are in benchmarks/test_loop.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twin import api_reads

READS = (
    ("get", "nodes", "-o", "json"),
    ("get", "pods", "-A", "-o", "json"),
    ("get", "clusterqueues.kueue.x-k8s.io", "-o", "json"),
    ("get", "configmap", "kube-root-ca.crt", "-n", "default", "-o", "json"),
)


def machine_cpu_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def timed(read: Callable[[tuple[str, ...]], str], reads: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per read over `reads` reads, cycling through READS."""
    cpu, wall = machine_cpu_s(), time.monotonic()
    for i in range(reads):
        json.loads(read(READS[i % len(READS)]))
    return (machine_cpu_s() - cpu) / reads, (time.monotonic() - wall) / reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--kubectl", type=Path, required=True)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    def through_kubectl(argv: tuple[str, ...]) -> str:
        done = subprocess.run([str(args.kubectl), f"--kubeconfig={args.kubeconfig}", *argv],
                              capture_output=True, text=True, check=True)  # fmt: skip
        return done.stdout

    def answered(argv: tuple[str, ...]) -> str:
        out = api_reads.read(args.kubeconfig, argv)
        if out is None:
            raise SystemExit(
                f"{' '.join(argv)} was left to kubectl: is the twin up, and its kubeconfig this one?"
            )
        return out

    rows = {"kubectl process": through_kubectl, "api_reads, kept-alive": answered}
    print(f"{args.reads} reads a round, {args.rounds} rounds, cycling through {len(READS)} reads")
    print("| reader | CPU s per read (median of rounds) | wall s per read |")
    print("|---|---:|---:|")
    for label, read in rows.items():
        results = [timed(read, args.reads) for _ in range(args.rounds)]
        cpu = statistics.median(r[0] for r in results)
        wall = statistics.median(r[1] for r in results)
        print(f"| {label} | {cpu:.4f} | {wall:.4f} |")


if __name__ == "__main__":
    main()
