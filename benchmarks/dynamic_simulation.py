"""Speed and memory of the dynamic simulation (scheduler.sim.dynamic) on openb's default trace, 1x and 16x.

Usage: python benchmarks/dynamic_simulation.py [--scales 1,16] [--policies MostAllocated,FGD]
                                               [--autoscale off,on] [--load light,loaded] [--repeat N]
                                               [--digest] [--profile CASE]

Targets: one dynamic run of the full openb default trace on its 1,213 nodes in <= 10 s, and the
16x-scaled cluster (~19k nodes, ~130k jobs) in <= 60 s, on a 2-core machine; the same under load (``--load
loaded``: queues, borrowing and preemption), and a run of 1M jobs under load in <= 10 min.

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

**Loaded** (``--load loaded``): the trace's own times leave openb's cluster idle enough that every job starts
at once. The loaded job set is every GPU job of two openb pod lists with times, ``openb_pod_list_default.csv``
and ``openb_pod_list_gpuspec33.csv`` (7,064 each: 14,128), their arrivals multiplied by 0.0003 (the
149 days of the trace arrive within 65 minutes, durations kept), each job given a priority 0, 10 or 100 by
``numpy.random.default_rng(43)``; teams, quotas and settings as above (classical preemption:
``reclaimWithinCohort: Any``, ``withinClusterQueue: LowerPriority``, waitForPodsReady 1800 s). At scale k the
nodes and jobs are copied as above, a copy's jitter compressed alike ([0, 0.18) s).

``--digest`` hashes every admission (job, time, pool, units), every preemption (victim, preemptor, pool,
reason) and the whole Result but its preemption counts by queue pair (which the preemptions hashed already
decide), so two trees can be shown to decide alike.

Only ``scheduler.sim.dynamic.simulate(world)`` is timed (reading and building the World is not). Each case
runs in its own child process so that its peak resident memory (``ru_maxrss``, reading and building
included) is its own. ``--profile CASE`` (e.g. ``16:FGD:on``) runs one case under cProfile and prints the top
functions by cumulative and by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.fgd.model import Cluster, Workload  # noqa: E402
from scheduler.sim import read_nodes  # noqa: E402
from scheduler.sim.dynamic import Jobs, Pool, Queue, Result, Settings, World, simulate  # noqa: E402
from scheduler.sim.dynamic.engine import Simulation  # noqa: E402
from scheduler.sim.timed_traces import read_timed_pods  # noqa: E402

TEAMS = 4
SEED = 42
JITTER_S = 600.0
TARGET_S = {1: 10.0, 16: 60.0}
# The loaded job set: two openb pod lists with times, their arrivals compressed so queues form, three priorities
LOADED_TRACES = (("openb_pod_list_default.csv", "d-"), ("openb_pod_list_gpuspec33.csv", "s33-"))
COMPRESS = 0.0003
PRIORITIES = (0, 10, 100)


def trace_dir() -> Path:
    """The reference data: GPUFLEET_SHARED, ../shared, or the pinned files fetched and verified into a cache."""
    from benchmarks.reference_data import ensure

    return ensure() / "traces" / "alibaba-gpu-v2023"


def _gpu_jobs(name: str, prefix: str) -> tuple[Workload, np.ndarray, np.ndarray, np.ndarray]:
    """One openb pod list's GPU jobs (CPU-only pods leave the GPU simulation): request, arrival, duration, pods."""
    trace = read_timed_pods(trace_dir() / name)
    keep = np.flatnonzero(trace.workload.num_gpu > 0)
    wl = trace.workload.take(keep)
    if prefix:
        wl = replace(wl, names=tuple(f"{prefix}{n}" for n in wl.names))
    return wl, trace.arrival[keep], trace.duration[keep], trace.pods[keep]


def _concat(parts: list[Workload]) -> Workload:
    return Workload(
        names=tuple(n for w in parts for n in w.names),
        cpu_milli=np.concatenate([w.cpu_milli for w in parts]),
        memory_mib=np.concatenate([w.memory_mib for w in parts]),
        num_gpu=np.concatenate([w.num_gpu for w in parts]),
        gpu_milli=np.concatenate([w.gpu_milli for w in parts]),
        gpu_spec=tuple(s for w in parts for s in w.gpu_spec),
        source=parts[0].source,
        rows=np.concatenate([w.rows for w in parts]),
    )


def build_world(scale: int, policy: str, autoscale: bool, loaded: bool = False) -> World:
    """openb's GPU nodes and default trace as a World (see the module docstring), ``scale`` times over; with
    ``loaded``, the loaded job set (default + gpuspec33, arrivals compressed, three priorities)."""
    base = read_nodes(trace_dir() / "openb_node_list_gpu_node.csv")
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

    if loaded:
        parts = [_gpu_jobs(name, prefix) for name, prefix in LOADED_TRACES]
        wl = _concat([w for w, _, _, _ in parts])
        base_arrival = np.concatenate([a for _, a, _, _ in parts]) * COMPRESS
        base_duration = np.concatenate([d for _, _, d, _ in parts])
        base_pods = np.concatenate([g for _, _, _, g in parts])
        jitter_s = JITTER_S * COMPRESS
    else:
        wl, base_arrival, base_duration, base_pods = _gpu_jobs("openb_pod_list_default.csv", "")
        jitter_s = JITTER_S
    every = "|".join(names)
    spec = []
    for text in wl.gpu_spec:
        wanted = [m for m in text.split("|") if m in gpus]
        spec.append("|".join(wanted) if text else every)
    n = wl.size
    index = np.tile(np.arange(n), scale)
    arrival = np.tile(base_arrival, scale)
    if scale > 1:
        jitter = np.random.default_rng(scale).uniform(0.0, jitter_s, size=n * (scale - 1))
        arrival[n:] += jitter
    order = np.argsort(arrival, kind="stable")
    index, arrival = index[order], arrival[order]
    team = np.random.default_rng(SEED).integers(0, TEAMS, size=n)[index]
    if loaded:
        priority = np.random.default_rng(SEED + 1).choice(PRIORITIES, size=n)[index]
    else:
        priority = np.zeros(len(index), dtype=np.int64)
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
        duration=base_duration[index],
        pods=base_pods[index],
        queue=team.astype(np.int64),
        priority=priority.astype(np.int64),
        workload=workload,
    )
    queues = []
    for q in range(TEAMS):
        nominal = {p: gpus[p] // TEAMS + (1 if q < gpus[p] % TEAMS else 0) for p in names}
        queues.append(Queue(f"team-{q}", tuple(names), nominal, {p: None for p in names}))
    settings = Settings(policy=policy, autoscale=autoscale, seed=SEED)
    return World(cluster, pools, tuple(queues), jobs, settings)


def parse_case(text: str) -> tuple[int, str, bool, bool]:
    """``[loaded:]SCALE:POLICY:on|off`` -> (scale, policy, autoscale, loaded)."""
    parts = text.split(":")
    loaded = parts[0] == "loaded"
    scale, policy, scaled = parts[1:] if loaded else parts
    return int(scale), policy, scaled == "on", loaded


class Traced(Simulation):
    """A run that keeps its decisions: every admission (job, time, pool, units) and every preemption (victim,
    preemptor, pool, reason), in order; two engines that agree on these agree on the whole run."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.log: list[tuple[object, ...]] = []

    def holding(self, job: int, t: float, units: int) -> None:
        if units > 0:
            self.log.append(("admit", job, t, self.jobs[job].pool, units))

    def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
        self.log.append(("preempt", victim, preemptor, pool, reason))


def digest(log: list[tuple[object, ...]], result: Result) -> str:
    """A hash of a run's decisions and its whole Result (printed so two trees can be compared)."""
    h = hashlib.sha256(repr(log).encode())
    fields = result.to_dict(waits=True)
    # the counts by queue pair restate the preemptions the log holds (victim, preemptor, pool): left out, so
    # digests recorded before the Result had them still compare
    del fields["preempted_by"]
    for pool in fields["pools"]:  # the evictions by pool restate the total, hashed already: left out alike
        del pool["ready_evictions"]
    # the values, not their Python types: a float and a numpy float of the same value hash alike
    h.update(json.dumps(fields, sort_keys=True, default=float).encode())
    return h.hexdigest()[:16]


def run_case(text: str, trace: bool = False) -> dict[str, object]:
    """One case in this process: build, time simulate(), report (printed as JSON by --case); with ``trace``,
    the run's decisions are also hashed (``digest``), which costs a little time."""
    scale, policy, autoscale, loaded = parse_case(text)
    t0 = time.perf_counter()
    world = build_world(scale, policy, autoscale, loaded)
    built = time.perf_counter() - t0
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sim = Traced(world) if trace else Simulation(world)
    t0, c0 = time.perf_counter(), time.process_time()
    result = sim.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out: dict[str, object] = {
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
        "ready_timeouts": result.ready_timeouts,
        "wait_p95_min": round(result.wait_p95_s / 60, 1),
        "queued_mean_min": round(result.queued_mean_s / 60, 1),
        "utilisation_ready": round(result.utilisation_ready, 3),
    }
    if isinstance(sim, Traced):
        out["digest"] = digest(sim.log, result)
    return out


def profile(text: str, top: int = 25) -> None:
    scale, policy, autoscale, loaded = parse_case(text)
    world = build_world(scale, policy, autoscale, loaded)
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
    parser.add_argument(
        "--load", default="light", help="light (the trace's own times) or loaded, or both: light,loaded"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per case, each in its own process")
    parser.add_argument("--digest", action="store_true", help="hash each run's decisions and Result")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one case, in this process, JSON out
    parser.add_argument("--profile", metavar="CASE", help="e.g. 16:FGD:on or loaded:1:MostAllocated:off")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, trace=args.digest)))
        return
    if args.profile:
        profile(args.profile)
        return
    head = f"{'load':<6} {'scale':>5} {'policy':<14} {'autoscale':<9} {'nodes':>6} {'jobs':>7} {'sim s':>7} {'cpu s':>7}"
    print(f"{head} {'peak MiB':>8} {'target':>7}  started never unhostable preempt timeouts digest")
    for load in args.load.split(","):
        for scale in (int(s) for s in args.scales.split(",")):
            for policy in args.policies.split(","):
                for scaled in args.autoscale.split(","):
                    case = (
                        f"{scale}:{policy}:{scaled}"
                        if load == "light"
                        else f"loaded:{scale}:{policy}:{scaled}"
                    )
                    command = [sys.executable, __file__, "--case", case] + (
                        ["--digest"] if args.digest else []
                    )
                    for _ in range(args.repeat):
                        out = subprocess.run(command, capture_output=True, text=True, check=True)
                        r = json.loads(out.stdout.strip().splitlines()[-1])
                        target = TARGET_S.get(scale)
                        verdict = "" if target is None else ("ok" if r["sim_s"] <= target else "MISSED")
                        print(
                            f"{load:<6} {scale:>5} {policy:<14} {scaled:<9} {r['nodes']:>6} {r['jobs']:>7} "
                            f"{r['sim_s']:>7.2f} {r['cpu_s']:>7.2f} {r['rss_peak_mib']:>8} {verdict:>7}  "
                            f"{r['started']} {r['never_started']} {r['unhostable']} {r['preemptions']} "
                            f"{r['ready_timeouts']} {r.get('digest', '')}",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
