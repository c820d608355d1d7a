"""Speed and memory of the dynamic simulation (scheduler.sim.dynamic) on openb's default trace, 1x and 16x.

Usage: python benchmarks/dynamic_simulation.py [--scales 1,16] [--policies MostAllocated,FGD]
                                               [--autoscale off,on] [--profile CASE]

Targets: one dynamic run of the full openb default trace on its 1,213 nodes in <= 10 s, and the
16x-scaled cluster (~19k nodes, ~130k jobs) in <= 60 s, on a 2-core machine.

The World is built without a stack, straight from the openb files:

- **Nodes**: ``openb_node_list_gpu_node.csv`` (``read_nodes``); one pool per GPU model (a node's model is its
  pool's name), exclusive (one quota unit per GPU), every node of the pool its maximum.
- **Jobs**: ``openb_pod_list_default.csv`` (``read_timed_pods``), CPU-only pods left out (as
  ``infra.simulate.stack.route`` does). A pod's ``gpu_spec`` lists the models it accepts, so it names the pools
  directly; an empty one becomes every pool.
- **Teams**: 4 queues, each job given to one by a seeded rng (seed 42); each queue's nominal quota in a pool is
  an equal share of the pool's GPUs (the remainder to the first queues), borrowing unlimited, all pools in
  its flavor list (in name order). All jobs priority 0.
- **Settings**: ``autoscale=False`` (every node up all the time), or ``autoscale=True`` with every pool
  starting at 0 nodes and a 600 s provisioning delay; the other settings are ``Settings``' defaults.
- **16x scale**: every node is copied 16 times (``<name>-r00`` .. ``<name>-r15``, so copy k of a pool's nodes
  joins the same pool) and every job 16 times; copy 0 keeps the trace's arrival, copies 1..15 arrive at the
  trace's arrival plus a uniform jitter in [0, 600) s drawn by ``numpy.random.default_rng(16)``. Jobs are then
  sorted by arrival (stable). Each copy keeps the job's request, duration and team.

Only ``scheduler.sim.dynamic.simulate(world)`` is timed (reading and building the World is not). Each case
runs in its own child process so that its peak resident memory (``ru_maxrss``, reading and building
included) is its own. ``--profile CASE`` (e.g. ``16:FGD:on``) runs one case under cProfile and prints the top
functions by cumulative and by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.fgd.model import Cluster, Workload  # noqa: E402
from scheduler.sim import read_nodes  # noqa: E402
from scheduler.sim.dynamic import Jobs, Pool, Queue, Settings, World, simulate  # noqa: E402
from scheduler.sim.timed_traces import read_timed_pods  # noqa: E402

TEAMS = 4
SEED = 42
JITTER_S = 600.0
TARGET_S = {1: 10.0, 16: 60.0}


def trace_dir() -> Path:
    """The reference data: GPUFLEET_SHARED, ../shared, or the pinned files fetched and verified into a cache."""
    from benchmarks.reference_data import ensure

    return ensure() / "traces" / "alibaba-gpu-v2023"


def build_world(scale: int, policy: str, autoscale: bool) -> World:
    """openb's GPU nodes and default trace as a World (see the module docstring), ``scale`` times over."""
    base = read_nodes(trace_dir() / "openb_node_list_gpu_node.csv")
    trace = read_timed_pods(trace_dir() / "openb_pod_list_default.csv")
    reps = range(scale)
    if scale > 1:
        cluster = Cluster.build(
            [f"{n}-r{k:02d}" for k in reps for n in base.names],
            np.tile(base.cpu_milli, scale),
            np.tile(base.memory_mib, scale),
            np.tile(base.num_gpu, scale),
            [m for _ in reps for m in base.gpu_model],
        )
    else:
        cluster = base
    names = sorted({m for m, g in zip(cluster.gpu_model, cluster.num_gpu.tolist(), strict=True) if g > 0})
    pools = tuple(
        Pool(
            name,
            tuple(i for i, m in enumerate(cluster.gpu_model) if m == name),
            min_nodes=0,
            provision_s=600.0,
        )
        for name in names
    )
    gpus = {p.name: int(cluster.num_gpu[list(p.nodes)].sum()) for p in pools}

    keep = np.flatnonzero(trace.workload.num_gpu > 0)  # CPU-only pods leave the GPU simulation
    wl = trace.workload.take(keep)
    every = "|".join(names)
    spec = []
    for text in wl.gpu_spec:
        wanted = [m for m in text.split("|") if m in gpus]
        spec.append("|".join(wanted) if text else every)
    n = len(keep)
    index = np.tile(np.arange(n), scale)
    arrival = np.tile(trace.arrival[keep], scale)
    if scale > 1:
        jitter = np.random.default_rng(scale).uniform(0.0, JITTER_S, size=n * (scale - 1))
        arrival[n:] += jitter
    order = np.argsort(arrival, kind="stable")
    index, arrival = index[order], arrival[order]
    team = np.random.default_rng(SEED).integers(0, TEAMS, size=n)[index]
    workload = Workload(
        names=tuple(
            f"{wl.names[i]}-r{k // n:02d}" for k, i in zip(order.tolist(), index.tolist(), strict=True)
        ),
        cpu_milli=wl.cpu_milli[index],
        memory_mib=wl.memory_mib[index],
        num_gpu=wl.num_gpu[index],
        gpu_milli=wl.gpu_milli[index],
        gpu_spec=tuple(spec[i] for i in index.tolist()),
        source=wl.source,
        rows=wl.rows[index],
    )
    jobs = Jobs(
        arrival=arrival,
        duration=trace.duration[keep][index],
        pods=trace.pods[keep][index],
        queue=team.astype(np.int64),
        priority=np.zeros(len(index), dtype=np.int64),
        workload=workload,
    )
    queues = []
    for q in range(TEAMS):
        nominal = {p: gpus[p] // TEAMS + (1 if q < gpus[p] % TEAMS else 0) for p in names}
        queues.append(Queue(f"team-{q}", tuple(names), nominal, {p: None for p in names}))
    settings = Settings(policy=policy, autoscale=autoscale, seed=SEED)
    return World(cluster, pools, tuple(queues), jobs, settings)


def parse_case(text: str) -> tuple[int, str, bool]:
    scale, policy, scaled = text.split(":")
    return int(scale), policy, scaled == "on"


def run_case(text: str) -> dict[str, object]:
    """One case in this process: build, time simulate(), report (printed as JSON by --case)."""
    scale, policy, autoscale = parse_case(text)
    t0 = time.perf_counter()
    world = build_world(scale, policy, autoscale)
    built = time.perf_counter() - t0
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    result = simulate(world)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "case": text,
        "nodes": world.cluster.size,
        "jobs": world.jobs.size,
        "build_s": round(built, 2),
        "sim_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "rss_built_mib": round(rss_built / 1024),
        "rss_peak_mib": round(rss / 1024),
        "started": result.started,
        "never_started": result.never_started,
        "unhostable": result.unhostable,
        "preemptions": result.preemptions,
        "wait_p95_min": round(result.wait_p95_s / 60, 1),
        "utilisation_ready": round(result.utilisation_ready, 3),
    }


def profile(text: str, top: int = 25) -> None:
    scale, policy, autoscale = parse_case(text)
    world = build_world(scale, policy, autoscale)
    prof = cProfile.Profile()
    prof.enable()
    simulate(world)
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scales", default="1,16")
    parser.add_argument("--policies", default="MostAllocated,FGD")
    parser.add_argument("--autoscale", default="off,on")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one case, in this process, JSON out
    parser.add_argument("--profile", metavar="CASE", help="e.g. 16:FGD:on")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    if args.profile:
        profile(args.profile)
        return
    head = f"{'scale':>5} {'policy':<14} {'autoscale':<9} {'nodes':>6} {'jobs':>7} {'sim s':>7} {'cpu s':>7}"
    print(f"{head} {'peak MiB':>8} {'target':>7}  started never unhostable preempt")
    for scale in (int(s) for s in args.scales.split(",")):
        for policy in args.policies.split(","):
            for scaled in args.autoscale.split(","):
                case = f"{scale}:{policy}:{scaled}"
                out = subprocess.run(
                    [sys.executable, __file__, "--case", case], capture_output=True, text=True, check=True
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
                target = TARGET_S.get(scale)
                verdict = "" if target is None else ("ok" if r["sim_s"] <= target else "MISSED")
                print(
                    f"{scale:>5} {policy:<14} {scaled:<9} {r['nodes']:>6} {r['jobs']:>7} {r['sim_s']:>7.2f} "
                    f"{r['cpu_s']:>7.2f} {r['rss_peak_mib']:>8} {verdict:>7}  {r['started']} "
                    f"{r['never_started']} {r['unhostable']} {r['preemptions']}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
