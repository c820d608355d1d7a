"""The real kube-scheduler's throughput on the twin at 1,000 nodes, with and without the extender (pods/s).

Usage: python benchmarks/scheduler_throughput.py [--nodes 1000] [--pods 500] [--sequential 100] [--runs 3]
           [--modes sequential,burst,backlog] [--profiles MostAllocated,FragmentationAware] [--json FILE]

Results of the last run are recorded in benchmarks/scheduler_throughput.md.

The cluster is the metal stack's two pools scaled to ``--nodes`` kwok nodes: 60% H100 hosts (8 whole GPUs,
192 cores, 2 TiB) and 40% L40S hosts (4 GPUs time-sliced 2 ways: 8 ``nvidia.com/gpu.shared``, 64 cores,
512 GiB), on a :class:`twin.replay.ReplayTwin`: the twin's real etcd, kube-apiserver, controller-manager
and kwok, the stack's ``gpu-binpack`` kube-scheduler with its real profile, and for FragmentationAware the
extender as its sidecar (its real entry point, the trace as its expected workload). The pods are the openb
default trace's GPU pods routed to the stack as it deploys them (``infra.simulate.stack.route``: a share is one
L40S replica, whole GPUs go to either pool), in a seeded random order; every pod fits.

Each profile gets one twin; once every node is schedulable (:func:`wait_schedulable`), each run measures, with
the pods of each mode deleted before the next:

- **sequential**: ``--sequential`` pods one at a time with :meth:`ReplayTwin.place` (create, then poll until
  bound), what ``invoke simulate --twin`` does; pods/s = pods / wall time. Latency-bound: one scheduling cycle,
  one bind and the client's poll per pod.
- **burst**: ``--pods`` pods created at once (8 client threads) while a raw watch records when each gets its
  ``spec.nodeName``; pods/s = pods / (last bound - first create). How long the creates took is reported: when
  it is about the whole time, the burst measured the API server's create rate, not the scheduler.
- **backlog**: the same pods created while gpu-binpack is stopped (SIGSTOP), then resumed (SIGCONT); pods/s =
  pods / (last bound - resume): what the scheduler (and extender) alone drain from a full queue.

Every phase records the cores the twin and this client used and the cores everything else on the machine used
(/proc), and what the logs say: with the extender, its access log's filter and prioritize requests (every pod
should reach the extender), and the scheduler's log lines where it went around the extender (it is
``ignorable``: a filter that errs or answers late is skipped). The scheduler binds every pod itself (the profile
has no ``bindVerb``), so "bind fell back to DefaultBinder" must stay absent. The summary ends with each mode's
ratio of the extender's pods/s to the profile alone's, run by run (run i of one profile against run i of the
other) and the 1-minute load average each run started under.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import signal
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from infra.simulate.stack import route, stack_model  # noqa: E402
from infra.stackfile import parse_config  # noqa: E402
from scheduler import sim  # noqa: E402
from scheduler.fgd.model import Cluster, Workload  # noqa: E402
from scheduler.sim.policies.fgd_extender import pod_object  # noqa: E402
from twin.replay import NAMESPACE, PROFILES, ReplayTwin  # noqa: E402

TRACE = Path("traces") / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
H100_SHARE = 0.6  # of the nodes; the rest are time-sliced L40S hosts
CREATE_THREADS = 8
MODES = ("sequential", "burst", "backlog")
IDLE_SECONDS = 5  # the twin's own load with no pods (kwok renewing 1,000 node leases, the controllers)
REQUEST = re.compile(rb'"POST /(filter|prioritize|bind) HTTP/1\.[01]" (\d{3})')  # bind: an old profile
SCHEDULER_LOG = {  # kube-scheduler v1.35 pkg/scheduler/schedule_one.go, at its default verbosity
    "bind fell back to DefaultBinder": b"Skipping extender in bind as it returned error",
    "filter skipped the extender": b"Skipping extender as it returned error",
    "scheduling errors (retried)": b"Error scheduling pod; retrying",
}


def shared_dir() -> Path:
    """The reference data: GPUFLEET_SHARED, ../shared, or the pinned files fetched and verified into a cache."""
    from benchmarks.reference_data import ensure

    return ensure()


def stack(nodes: int) -> tuple[Cluster, dict[str, int], Workload]:
    """The metal stack's two pools scaled to `nodes` hosts, and the openb default trace routed to it."""
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"])
    h100 = round(nodes * H100_SHARE)
    pools = config["gpufleet:nodePools"]
    pools[0]["hosts"] = [f"h100-{i:04d}" for i in range(h100)]
    pools[1]["hosts"] = [f"l40s-{i:04d}" for i in range(nodes - h100)]
    config["gpufleet:teams"] = [{"name": "bench", "quotas": {"h100": 8 * h100, "l40s": 4 * (nodes - h100)}}]
    spec = parse_config(config, "throughput")
    model = stack_model(spec)
    workload, _ = route(model, sim.read_pods(shared_dir() / TRACE), spec)
    return model.cluster, model.units, workload


def pod_list(workload: Workload, count: int, seed: int, prefix: str) -> list[dict[str, Any]]:
    """`count` pods of the workload in a seeded random order (drawn again from the start when it runs out)."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(workload.size) for _ in range(count // workload.size + 1)])
    w = workload.take(order[:count])
    rows = zip(w.cpu_milli, w.memory_mib, w.num_gpu, w.gpu_milli, w.gpu_spec, strict=True)
    return [
        pod_object(f"{prefix}-{i:05d}", int(c), int(m), int(k), int(d), s)
        for i, (c, m, k, d, s) in enumerate(rows)
    ]


def capacity_share(cluster: Cluster, units: dict[str, int], pods: list[dict[str, Any]]) -> float:
    """The share of the cluster's GPU units (whole GPUs and replicas) the pods ask for."""
    total = sum(
        int(g) * units.get(str(m), 1) for g, m in zip(cluster.num_gpu, cluster.gpu_model, strict=True)
    )
    asked = 0
    for pod in pods:
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        asked += sum(int(v) for v in limits.values())
    return asked / total


def _component(pid: int, me: int) -> str:
    """Which part of the twin (or this client) a process of ours is."""
    if pid == me:
        return "client"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    name = Path(argv[0].decode(errors="replace")).name
    if name == "kube-scheduler":
        return "gpu-binpack" if any(a.endswith(b"gpu-binpack.yaml") for a in argv) else "default-scheduler"
    if name.startswith("python"):
        return "extender" if b"scheduler.extender" in argv else "replay session"
    return name


def _jiffies() -> tuple[int, dict[int, int]]:
    """(busy jiffies of the whole machine, jiffies of each process of this one's tree: the twin and the client)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    busy = sum(int(x) for i, x in enumerate(fields[:8]) if i not in (3, 4))  # all but idle and iowait
    parent: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            rest = stat.rsplit(")", 1)[1].split()
            parent[int(entry.name)] = int(rest[1])
            used[int(entry.name)] = int(rest[11]) + int(rest[12])
    me, mine = os.getpid(), {}
    for pid, ticks in used.items():
        p = pid
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            mine[pid] = ticks
    return busy, mine


class Cpu:
    """Cores used during a phase: by each part of the twin and this client, and by the rest of the machine."""

    def begin(self) -> Cpu:
        self.start, self.before = time.perf_counter(), _jiffies()
        return self

    def __enter__(self) -> Cpu:
        return self.begin()

    def __exit__(self, *_: object) -> None:
        self.end()

    def end(self) -> None:
        seconds = time.perf_counter() - self.start
        busy, mine = _jiffies()
        hz = os.sysconf("SC_CLK_TCK") * seconds
        me = os.getpid()
        parts: dict[str, float] = {}
        for pid, ticks in mine.items():
            name = _component(pid, me)
            parts[name] = parts.get(name, 0) + (ticks - self.before[1].get(pid, 0)) / hz
        ours = sum(mine.values()) - sum(self.before[1].get(pid, 0) for pid in mine)
        self.twin = round(ours / hz, 2)
        self.other = round(max(busy - self.before[0] - ours, 0) / hz, 2)
        self.parts = {k: round(v, 2) for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v >= 0.01}

    def numbers(self) -> dict[str, Any]:
        return {"twin_cores": self.twin, "other_cores": self.other, "cores": self.parts}


def sequential(twin: ReplayTwin, pods: list[dict[str, Any]]) -> dict[str, Any]:
    unplaced = 0
    with Cpu() as cpu:
        start = time.perf_counter()
        for pod in pods:
            if twin.place(pod) is None:
                unplaced += 1
        seconds = time.perf_counter() - start
    return {"pods": len(pods), "seconds": round(seconds, 2), "pods_per_s": round(len(pods) / seconds, 1),
            "unschedulable": unplaced, **cpu.numbers()}  # fmt: skip


def clear(twin: ReplayTwin) -> float:
    """Delete every pod of the replay's namespace (`CREATE_THREADS` at a time: the API server's own
    deletecollection deletes one by one) and wait until they are gone and the watches saw it; the seconds."""
    core = twin.core()
    start = time.perf_counter()
    items = json.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)["items"]

    def delete(name: str) -> None:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0, _preload_content=False)

    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(delete, [i["metadata"]["name"] for i in items]))
    deadline = time.monotonic() + 120
    while json.loads(core.list_namespaced_pod(NAMESPACE, limit=1, _preload_content=False).data)["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError("the pods were not deleted in 120 s")
        time.sleep(0.5)
    time.sleep(3)  # the scheduler's cache and the extender's view take the deletions in
    return time.perf_counter() - start


def scheduler_pid(twin: ReplayTwin) -> int:
    """The twin's gpu-binpack kube-scheduler (its command line names the configuration in the twin's folder)."""
    flag = f"--config={twin.folder / 'gpu-binpack.yaml'}".encode()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0].endswith(b"kube-scheduler") and flag in argv:
                return int(entry.name)
    raise RuntimeError(f"no gpu-binpack kube-scheduler runs for {twin.folder}")


def burst(
    twin: ReplayTwin, pods: list[dict[str, Any]], timeout: float, paused: bool = False
) -> dict[str, Any]:
    """Create all `pods` at once; the time from the first create until the last is bound. `paused`: create
    them while gpu-binpack is stopped (SIGSTOP) and time from its SIGCONT, a backlog the scheduler alone drains."""
    core = twin.core()
    names = {p["metadata"]["name"] for p in pods}
    bound: dict[str, float] = {}
    unschedulable: set[str] = set()
    rv = json.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)["metadata"][
        "resourceVersion"
    ]
    done = threading.Event()
    watching = threading.Event()
    failure: list[BaseException] = []

    def watch() -> None:
        """Every pod event from `rv` on, raw JSON (the client's models are too slow for thousands of events);
        a watch the API server ends (it may drop a slow consumer) is resumed from the last version seen."""
        version = rv
        deadline = time.monotonic() + timeout
        try:
            while len(bound) < len(names) and time.monotonic() < deadline:
                stream = core.list_namespaced_pod(NAMESPACE, watch=True, resource_version=version,
                                                  timeout_seconds=max(1, int(deadline - time.monotonic())),
                                                  _preload_content=False)  # fmt: skip
                watching.set()
                buffer = b""
                for chunk in stream.stream(65536):
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    now = time.perf_counter()
                    for line in lines:
                        if line:
                            version = seen(json.loads(line), now) or version
                    if len(bound) == len(names):
                        break
                stream.release_conn()
        except BaseException as exc:  # reported by the caller
            failure.append(exc)
        finally:
            watching.set()
            done.set()

    def seen(event: dict[str, Any], now: float) -> str | None:
        if event.get("type") == "ERROR":
            raise RuntimeError(f"the pod watch failed: {event.get('object')}")
        obj = event["object"]
        name = obj["metadata"]["name"]
        if name in names and name not in bound:
            if obj["spec"].get("nodeName"):
                bound[name] = now
                unschedulable.discard(name)
            elif any(c.get("reason") == "Unschedulable" for c in obj.get("status", {}).get("conditions", [])):
                unschedulable.add(name)
        return str(obj["metadata"]["resourceVersion"])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    watching.wait(30)

    def create(pod: dict[str, Any]) -> None:
        body = {**pod, "metadata": {**pod["metadata"], "namespace": NAMESPACE}}
        body["metadata"].pop("uid", None)
        core.create_namespaced_pod(NAMESPACE, body, _preload_content=False)

    pid = scheduler_pid(twin) if paused else 0
    cpu = Cpu()
    if paused:
        os.kill(pid, signal.SIGSTOP)
    else:
        cpu.begin()
    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(create, pods))
        created = time.perf_counter() - start
    finally:
        if paused:
            time.sleep(1)  # the API server has sent the last pods' events
            cpu.begin()
            start = time.perf_counter()
            os.kill(pid, signal.SIGCONT)
    done.wait(timeout + 30)
    cpu.end()
    if failure:
        raise failure[0]
    if len(bound) < len(names):
        raise TimeoutError(f"{len(names) - len(bound)} of {len(names)} pods not bound in {timeout:.0f} s "
                           f"({len(unschedulable)} unschedulable)")  # fmt: skip
    seconds = max(bound.values()) - start
    return {"pods": len(pods), "seconds": round(seconds, 2), "pods_per_s": round(len(pods) / seconds, 1),
            "create_seconds": round(created, 2), "unschedulable": len(unschedulable), **cpu.numbers()}  # fmt: skip


def log_counts(twin: ReplayTwin) -> dict[str, int]:
    """What the extender answered (its access log: one line per request, by verb, non-200 apart) and how often
    the scheduler went around it (its log: an ignorable extender's error in filter or bind, a failed bind)."""
    counts: dict[str, int] = {}
    log = twin.folder / "logs" / "extender.log"
    if log.is_file():
        for verb, status in REQUEST.findall(log.read_bytes()):
            key = verb.decode() if status == b"200" else f"{verb.decode()} {status.decode()}"
            counts[key] = counts.get(key, 0) + 1
    text = (twin.folder / "logs" / "gpu-binpack.log").read_bytes()
    for key, pattern in SCHEDULER_LOG.items():
        if n := text.count(pattern):
            counts[key] = n
    return counts


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def wait_schedulable(twin: ReplayTwin, timeout: float = 600) -> float:
    """Wait until no node has the not-ready taint; the seconds it took.

    The NodeTaint admission plugin gives every new node ``node.kubernetes.io/not-ready:NoSchedule``, and the
    node-lifecycle controller takes it off once kwok reports the node Ready, at the controller-manager's default
    client rate (``--kube-api-qps 20``, a read and a patch per node): about 9 nodes a second, so 1,000 nodes
    all created at once take about 110 s. Measuring before that would measure the scheduler's retries."""
    core = twin.core()
    start = time.perf_counter()
    while True:
        nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
        tainted = sum(
            any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints", []))
            for n in nodes
        )
        if not tainted:
            return time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"{tainted} nodes still have the not-ready taint after {timeout:.0f} s")
        time.sleep(2)


def ran_config(twin: ReplayTwin) -> dict[str, Any]:
    """What of the gpu-binpack configuration the twin ran bears on throughput."""
    config = yaml.safe_load((twin.folder / "gpu-binpack.yaml").read_text())
    profile = config["profiles"][0]
    return {
        "percentageOfNodesToScore": profile.get(
            "percentageOfNodesToScore", config.get("percentageOfNodesToScore")
        ),
        "extenders": [e["urlPrefix"] for e in config.get("extenders", [])],
        "clientConnection": {
            k: v for k, v in config.get("clientConnection", {}).items() if k != "kubeconfig"
        },
    }


def profile_runs(cluster: Cluster, units: dict[str, int], workload: Workload, profile: str,
                 args: argparse.Namespace) -> list[dict[str, Any]]:  # fmt: skip
    """Every run of one profile on one twin (the pods of a run are deleted before the next)."""
    folder = ROOT / "build" / "bench" / "scheduler-throughput" / profile
    start = time.perf_counter()
    twin = ReplayTwin.start(cluster, units, profile, folder, target=workload)
    up = time.perf_counter() - start
    out = []
    try:
        untainted = wait_schedulable(twin)
        ran = ran_config(twin)
        with Cpu() as idle:
            time.sleep(IDLE_SECONDS)
        print(f"{profile}: twin up in {up:.1f} s, every node schedulable {untainted:.0f} s later; "
              f"idle: {json.dumps(idle.numbers())}; gpu-binpack ran {json.dumps(ran)}", flush=True)  # fmt: skip
        for run in range(args.runs):
            result: dict[str, Any] = {"profile": profile, "run": run, "config": ran, "idle": idle.numbers(),
                                      "loadavg_1m": os.getloadavg()[0]}  # fmt: skip
            for mode in args.modes:
                before = log_counts(twin)
                if mode == "sequential":
                    numbers = sequential(twin, pod_list(workload, args.sequential, 1000 + run, "seq"))
                else:
                    pods = pod_list(workload, args.pods, 2000 + run, mode)
                    numbers = burst(twin, pods, args.timeout, paused=mode == "backlog")
                numbers["clear_seconds"] = round(clear(twin), 1)
                numbers["logs"] = delta(log_counts(twin), before)
                result[mode] = numbers
            out.append(result)
            print(json.dumps(result), flush=True)
    finally:
        twin.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000, help="kwok GPU nodes (60%% H100, 40%% L40S)")
    parser.add_argument("--pods", type=int, default=500, help="pods of a burst and of a backlog")
    parser.add_argument("--sequential", type=int, default=100, help="pods placed one at a time")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    parser.add_argument("--runs", type=int, default=3, help="runs per profile (on one twin per profile)")
    parser.add_argument(
        "--profiles", default=",".join(PROFILES), help="comma-separated, of: " + ", ".join(PROFILES)
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds a burst may take")
    parser.add_argument("--json", type=Path, help="also write every run's numbers here")
    args = parser.parse_args()
    profiles = [p for p in args.profiles.split(",") if p]
    args.modes = [m for m in args.modes.split(",") if m]
    if unknown := set(args.modes) - set(MODES) or set(profiles) - set(PROFILES):
        parser.error(f"unknown mode or profile: {', '.join(sorted(unknown))}")
    cluster, units, workload = stack(args.nodes)
    share = capacity_share(cluster, units, pod_list(workload, args.pods, 2000, "burst"))
    print(f"{cluster.size} nodes, {os.cpu_count()} CPUs; burst of {args.pods} pods asks "
          f"{share:.0%} of the GPU units", flush=True)  # fmt: skip
    runs = []
    total = time.perf_counter()
    for profile in profiles:
        runs += profile_runs(cluster, units, workload, profile, args)
    print(f"total {time.perf_counter() - total:.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    print()
    print("| profile | mode | pods | pods/s (median) | runs (pods/s) |")
    print("|---|---|---:|---:|---|")
    label = {"MostAllocated": "gpu-binpack (MostAllocated)", "FragmentationAware": "gpu-binpack + extender"}
    for profile in profiles:
        mine = [r for r in runs if r["profile"] == profile]
        for mode in args.modes:
            rates = [r[mode]["pods_per_s"] for r in mine if mode in r]
            if rates:
                n = mine[0][mode]["pods"]
                print(f"| {label.get(profile, profile)} | {mode} | {n} | {statistics.median(rates):.1f} | "
                      f"{', '.join(f'{x:.1f}' for x in rates)} |")  # fmt: skip
    print_ratios(runs, args.modes)


def print_ratios(runs: list[dict[str, Any]], modes: list[str]) -> None:
    """The extender's pods/s over the profile alone's, pairing run i with run i (the machine's load drifts)."""
    alone = [r for r in runs if r["profile"] == "MostAllocated"]
    extender = [r for r in runs if r["profile"] == "FragmentationAware"]
    if not alone or not extender:
        return
    print()
    print("| mode | extender / alone (median) | per run | load (1 min) alone, extender |")
    print("|---|---:|---|---|")
    for mode in modes:
        pairs = [(a, e) for a, e in zip(alone, extender, strict=False) if mode in a and mode in e]
        ratios = [e[mode]["pods_per_s"] / a[mode]["pods_per_s"] for a, e in pairs]
        if ratios:
            loads = ", ".join(f"{a['loadavg_1m']:.1f}/{e['loadavg_1m']:.1f}" for a, e in pairs)
            print(f"| {mode} | {statistics.median(ratios):.2f} | {', '.join(f'{x:.2f}' for x in ratios)} | "
                  f"{loads} |")  # fmt: skip


if __name__ == "__main__":
    main()
