"""The dynamic simulation checked against the real thing: a scaled-down replay of jobs over time on the twin
(the real Kueue admitting against the stack's ClusterQueues, the real scheduler binding, kwok pods that finish
after their duration), and the same jobs through ``scheduler.sim.dynamic``, compared on admission order, queue
waits and preemptions.

The jobs are written as a generic timed trace (``scheduler.sim.timed_traces``) so the simulator reads them
through its own reader; the arrivals it is given are the moments the twin's Kueue first had each Workload, and
its durations how long each job's last admission held the quota on the twin, so the twin's submission and
pod-lifecycle lags are inputs, not differences. Each job is a batch/v1 Job in its team's namespace (Kueue's
LocalQueue `default`), `parallelism` = its pods, each pod asking its GPUs and carrying the duration annotation kwok completes it by
(``twin.kwok.DURATION_ANNOTATION``). The twin's record is read from a watch on Workloads: when each is
first seen, each time it is `Admitted` and when `Finished` (as the watch sees each new transition: the
conditions' lastTransitionTime has whole seconds only) and whether it was ever evicted by
preemption (Kueue v0.19.2 pkg/workload: condition `Evicted` reason `Preempted`, condition `Preempted`).
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from twin.kwok import DURATION_ANNOTATION

GPU = "nvidia.com/gpu"
PREFIX = "dyn"
HEADER = ["arrival", "duration", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "pods", "team",
          "priority"]  # fmt: skip


@dataclass(frozen=True)
class ReplayJob:
    index: int
    arrival: float  # seconds after the first job
    duration: float
    pods: int
    gpus: int  # per pod
    team: str
    priority: str

    @property
    def name(self) -> str:
        return f"{PREFIX}-{self.index:04d}"


def scaled_trace(
    teams: list[str],
    *,
    jobs: int = 200,
    rate_per_s: float = 0.5,
    duration_s: tuple[float, float] = (8.0, 30.0),
    priorities: tuple[tuple[str, float], ...] = (("default", 0.8), ("production", 0.1), ("preemptible", 0.1)),
    seed: int = 7,
    gangs: bool = True,
) -> list[ReplayJob]:
    """Seeded jobs for a stack with one whole-GPU pool: Poisson arrivals, durations uniform in `duration_s`,
    1/2/4/8 GPUs a pod, one job in four a gang of two (``gangs``; else every job one pod, drawn alike), teams
    alternating at random, mostly the default priority class."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate_per_s, size=jobs)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    names, weights = zip(*priorities, strict=True)
    out = []
    for i in range(jobs):
        duration = float(round(rng.uniform(*duration_s)))
        pods = int(rng.choice([1, 1, 1, 2]))  # drawn either way, so the other draws stay the same
        out.append(
            ReplayJob(
                index=i,
                arrival=round(float(arrivals[i]), 3),
                duration=duration,
                pods=pods if gangs else 1,
                gpus=int(rng.choice([1, 2, 4, 8])),
                team=str(rng.choice(teams)),
                priority=str(rng.choice(names, p=np.array(weights) / sum(weights))),
            )
        )
    return out


def write_trace(
    jobs: list[ReplayJob],
    path: Path,
    arrivals: list[float] | None = None,
    durations: list[float] | None = None,
) -> Path:
    """The jobs as a generic timed trace; `arrivals` and `durations` (what the twin measured) replace the
    planned ones."""
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        for job in jobs:
            at = arrivals[job.index] if arrivals is not None else job.arrival
            length = durations[job.index] if durations is not None else job.duration
            out.writerow([f"{at:.3f}", f"{length:.3f}", 1000, 4096, job.gpus, 1000, "", job.pods, job.team,
                          job.priority])  # fmt: skip
    return path


def job_object(job: ReplayJob, scheduler: str = "gpu-binpack") -> dict[str, Any]:
    """The batch/v1 Job of one trace row, for its team's LocalQueue `default` (Kueue LocalQueueDefaulting)."""
    requests = {"cpu": "1", "memory": "4Gi", GPU: str(job.gpus)}
    container = {"name": "main", "image": "registry.example/train:1",
                 "resources": {"requests": requests, "limits": requests},
                 # what the namespaces' Pod Security level "restricted" asks of every container
                 "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                     "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "namespace": job.team,
            "labels": {"kueue.x-k8s.io/priority-class": job.priority},
        },
        "spec": {
            "parallelism": job.pods,
            "completions": job.pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {DURATION_ANNOTATION: f"{job.duration:g}"}},
                "spec": {"restartPolicy": "Never", "schedulerName": scheduler, "containers": [container]},
            },
        },
    }


@dataclass
class TwinRecord:
    """What the twin did, in seconds after the first submission, each time the moment the watch saw the change
    (a condition's lastTransitionTime has whole seconds only, a tenth of these jobs' durations)."""

    submitted: dict[int, float] = field(default_factory=dict)  # before `kubectl create`
    created: dict[int, float] = field(default_factory=dict)  # the Workload first seen: Kueue knows the job
    admitted: dict[int, float] = field(default_factory=dict)  # first admission
    last_admitted: dict[int, float] = field(default_factory=dict)  # the admission that ran to the end
    finished: dict[int, float] = field(default_factory=dict)
    # the last time `PodsReady` turned true (Kueue's waitForPodsReady: every pod of the job running)
    ready: dict[int, float] = field(default_factory=dict)
    preempted: set[int] = field(default_factory=set)
    reasons: dict[str, int] = field(default_factory=dict)  # preemptions by the Preempted condition's reason
    # each preemption: when the watch saw it, the victim, the preemptor (from the condition's message, Kueue
    # v0.19.2 pkg/scheduler/preemption "Preempted to accommodate a workload (UID: ...)") or -1, the reason
    preemptions: list[tuple[float, int, int, str]] = field(default_factory=list)
    # each time a job held quota: (job, from, to, True if it ran to the end, False if evicted); from the
    # `Admitted` condition turning True, to its turning False (the quota released once the evicted pods are
    # gone) or `Finished`
    holds: list[tuple[int, float, float, bool]] = field(default_factory=list)
    seconds: float = 0.0

    def held(self, job: int) -> float | None:
        """How long the job's last admission held its quota: its duration plus the twin's lag in starting
        its pods and in releasing the quota once they completed."""
        if job in self.finished and job in self.last_admitted:
            return self.finished[job] - self.last_admitted[job]
        return None

    def ran(self, job: int) -> float | None:
        """How long the job's last run took from all its pods running (`PodsReady`) to `Finished`: its duration
        plus the twin's lag in completing it, without the lag in placing and starting its pods (which the
        simulator adds of its own)."""
        held = self.held(job)
        at = self.ready.get(job)
        if held is None or at is None or at < self.last_admitted[job]:
            return None
        return self.finished[job] - at


class WorkloadWatch(threading.Thread):
    """`kubectl get workloads -A -w -o json`: every change of every Workload, parsed as it streams."""

    def __init__(self, argv: list[str], record: TwinRecord, t0: list[float]) -> None:
        super().__init__(daemon=True)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.record, self.t0 = record, t0
        self.lock = threading.Lock()
        self.seen: set[tuple[int, str, str, str]] = set()
        self.uids: dict[str, int] = {}
        self.holding: dict[int, float] = {}  # job -> when its current admission began

    def run(self) -> None:
        decoder, buffer = json.JSONDecoder(), ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            buffer += line
            while buffer.strip():
                try:
                    obj, end = decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    break
                buffer = buffer.lstrip()[end:]
                self._seen(obj.get("object", obj))

    def _seen(self, wl: dict[str, Any]) -> None:
        owners = [r["name"] for r in wl.get("metadata", {}).get("ownerReferences", [])]
        job = next((int(n.split("-")[1]) for n in owners if n.startswith(PREFIX + "-")), None)
        if job is None:
            return
        now = time.monotonic() - self.t0[0]
        with self.lock:
            self.record.created.setdefault(job, now)
            self.uids[wl["metadata"].get("uid", "")] = job
            # `Finished` first: a finishing job's release is not an eviction
            conditions = sorted(
                wl.get("status", {}).get("conditions", []), key=lambda c: c["type"] != "Finished"
            )
            for c in conditions:
                key = (job, c["type"], c["lastTransitionTime"], c.get("status", ""))
                if key in self.seen:  # the same transition, in a later update of the Workload
                    continue
                self.seen.add(key)
                if c.get("status") != "True":
                    if c["type"] == "Admitted" and job in self.holding:  # evicted: its quota released
                        self.record.holds.append((job, self.holding.pop(job), now, False))
                    continue
                if c["type"] == "Admitted":
                    self.record.admitted.setdefault(job, now)
                    self.record.last_admitted[job] = now
                    self.holding.setdefault(job, now)
                elif c["type"] == "PodsReady":
                    self.record.ready[job] = now
                elif c["type"] == "Finished":
                    self.record.finished.setdefault(job, now)
                    if job in self.holding:
                        self.record.holds.append((job, self.holding.pop(job), now, True))
                elif c["type"] == "Preempted" or (c["type"] == "Evicted" and c.get("reason") == "Preempted"):
                    self.record.preempted.add(job)
                    if c["type"] == "Preempted":  # InClusterQueue, InCohortReclamation, ... once per eviction
                        reason = c.get("reason", "")
                        self.record.reasons[reason] = self.record.reasons.get(reason, 0) + 1
                        uid = re.search(r"\(UID: ([0-9a-f-]+)", c.get("message", ""))
                        by = self.uids.get(uid.group(1), -1) if uid else -1
                        self.record.preemptions.append((now, job, by, reason))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def replay_on_twin(
    kubectl: Path, kubeconfig: Path, jobs: list[ReplayJob], timeout_s: float = 1800
) -> TwinRecord:
    """Submit each job at its arrival (in real seconds) and wait until every Workload has finished."""
    base = [str(kubectl), f"--kubeconfig={kubeconfig}"]
    record = TwinRecord()
    t0 = [time.monotonic(), time.time()]
    watch = WorkloadWatch([*base, "get", "workloads.kueue.x-k8s.io", "-A", "-w", "-o", "json", "--output-watch-events"],
                   record, t0)  # fmt: skip
    watch.start()
    started = time.monotonic()
    try:
        t0[0], t0[1] = time.monotonic(), time.time()
        for job in jobs:
            delay = job.arrival - (time.monotonic() - t0[0])
            if delay > 0:
                time.sleep(delay)
            record.submitted[job.index] = time.monotonic() - t0[0]
            done = subprocess.run([*base, "create", "-f", "-"], input=json.dumps(job_object(job)),
                                  capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"kubectl create job {job.name}: {done.stderr.strip()}")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with watch.lock:
                if len(record.finished) == len(jobs):
                    break
            time.sleep(1)
        else:
            raise TimeoutError(f"{len(jobs) - len(record.finished)} of {len(jobs)} jobs did not finish")
    finally:
        watch.stop()
        for ns in sorted({j.team for j in jobs}):
            subprocess.run([*base, "delete", "jobs", "-n", ns, "--all", "--wait=false"], capture_output=True,
                           check=False, timeout=120)  # fmt: skip
    record.seconds = time.monotonic() - started
    return record


@dataclass
class SimRecord:
    admitted: dict[
        int, float
    ]  # first admission: its quota reserved (the twin's `Admitted`, no admission checks)
    preempted: set[int]
    reasons: dict[str, int] = field(default_factory=dict)  # named as Kueue names them
    holds: list[tuple[int, float, float, bool]] = field(default_factory=list)  # as TwinRecord.holds
    started: dict[int, float] = field(
        default_factory=dict
    )  # first time all its pods ran (placement after quota)


def simulate(
    spec: Any, trace: Path, fair_sharing: bool | None = None, approach: str | None = None
) -> SimRecord:
    """The same jobs through the dynamic simulator, with the stack's world (``infra.simulate.dynamic``);
    ``fair_sharing`` overrides the stack's setting (the classical algorithm on a fair-sharing stack shows
    what modelling fair sharing changes); ``approach`` names an alternative of the comparison
    (``scheduler.sim.dynamic.alternatives``, e.g. the null model ``null-fifo``) to run instead of the stack's
    queues, on the same nodes and jobs."""
    from dataclasses import replace

    from infra.simulate.dynamic import stack_world
    from scheduler.sim.dynamic.alternatives import REGISTRY
    from scheduler.sim.dynamic.engine import Simulation
    from scheduler.sim.timed_traces import read_timed_pods

    world = stack_world(spec, read_timed_pods(trace)).world
    if fair_sharing is not None:
        world = replace(world, settings=replace(world.settings, fair_sharing=fair_sharing))
    if approach is not None:
        if approach not in REGISTRY:
            raise ValueError(f"unknown approach {approach!r}; choose from {', '.join(REGISTRY)}")
        world = REGISTRY[approach].transform(world)
    victims: set[int] = set()
    reasons: dict[str, int] = {}
    holds: list[tuple[int, float, float, bool]] = []
    since: dict[int, float] = {}

    class Recording(Simulation):
        def preempting(self, victim: int, preemptor: int, pool: int, reason: str) -> None:
            victims.add(victim)
            reasons[reason] = reasons.get(reason, 0) + 1
            super().preempting(victim, preemptor, pool, reason)

        def holding(self, job: int, t: float, units: int) -> None:
            if units > 0:
                since[job] = t
            else:
                holds.append((job, since.pop(job), t, False))

    sim = Recording(world)
    sim.run()
    last = {h[0]: i for i, h in enumerate(holds)}  # every job runs to its end: its last hold
    for i in last.values():
        holds[i] = (*holds[i][:3], True)
    first: dict[int, float] = {}
    for j, begin, _, _ in holds:
        first[j] = min(begin, first.get(j, begin))
    arrival = world.jobs.arrival
    started = {j: float(arrival[j]) + w for j, w in sim.recorder.first_wait.items()}
    return SimRecord(first, victims, reasons, holds, started)


PROMPT_S = 2.0  # a job admitted within this of its arrival went straight in


def jittered(
    spec: Any,
    jobs: list[ReplayJob],
    arrivals: list[float],
    durations: list[float],
    folder: Path,
    *,
    draws: int = 8,
    spread_s: float = 0.5,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """How far the simulator's waits move when each arrival moves by up to ``spread_s`` at random: the
    sensitivity of a loaded queue to timing alone (the twin's own timing drifts by as much from run to run).
    The lowest and highest mean wait, median wait and share admitted within PROMPT_S over ``draws`` draws."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {"mean_wait_s": [], "median_wait_s": [], "prompt_share": []}
    for i in range(draws):
        moved = [
            max(a + float(d), 0.0)
            for a, d in zip(arrivals, rng.uniform(-spread_s, spread_s, len(arrivals)), strict=True)
        ]
        sim = simulate(spec, write_trace(jobs, folder / f"jittered-{i}.csv", moved, durations))
        shift = min(moved)
        waits = np.array(
            [
                max(sim.admitted[j.index] + shift - moved[j.index], 0.0)
                for j in jobs
                if j.index in sim.admitted
            ]
        )
        out["mean_wait_s"].append(float(waits.mean()))
        out["median_wait_s"].append(float(np.median(waits)))
        out["prompt_share"].append(float((waits <= PROMPT_S).mean()))
    return {k: (min(v), max(v)) for k, v in out.items()}


@dataclass(frozen=True)
class Comparison:
    jobs: int
    twin_mean_wait_s: float
    sim_mean_wait_s: float
    twin_prompt_share: float  # of the jobs, those admitted within PROMPT_S of arriving
    sim_prompt_share: float
    twin_median_wait_s: float
    sim_median_wait_s: float
    twin_p95_wait_s: float
    sim_p95_wait_s: float
    order_agreement: (
        float  # of job pairs the twin admitted more than `gap` apart, the share the sim orders alike
    )
    twin_preempted: tuple[int, ...]
    sim_preempted: tuple[int, ...]
    twin_reasons: dict[str, int]
    sim_reasons: dict[str, int]
    # the mean wait with each job weighted by its GPUs: what the queue costs in GPU terms
    twin_gpu_weighted_wait_s: float
    sim_gpu_weighted_wait_s: float
    # GPU-seconds of quota held (all runs), and held by evicted runs until they were preempted
    twin_quota_gpu_s: float
    sim_quota_gpu_s: float
    twin_lost_gpu_s: float
    sim_lost_gpu_s: float

    @property
    def mean_difference(self) -> float:
        return abs(self.sim_mean_wait_s - self.twin_mean_wait_s) / max(self.twin_mean_wait_s, 1e-9)

    @property
    def gpu_weighted_difference(self) -> float:
        return abs(self.sim_gpu_weighted_wait_s - self.twin_gpu_weighted_wait_s) / max(
            self.twin_gpu_weighted_wait_s, 1e-9
        )

    @property
    def quota_difference(self) -> float:
        return abs(self.sim_quota_gpu_s - self.twin_quota_gpu_s) / max(self.twin_quota_gpu_s, 1e-9)

    @property
    def median_difference(self) -> float:
        return abs(self.sim_median_wait_s - self.twin_median_wait_s) / max(self.twin_median_wait_s, 1e-9)

    @property
    def p95_difference(self) -> float:
        return abs(self.sim_p95_wait_s - self.twin_p95_wait_s) / max(self.twin_p95_wait_s, 1e-9)

    @property
    def preempted_ratio(self) -> float:
        """Jobs the simulator preempted over those the twin preempted."""
        return len(self.sim_preempted) / max(len(self.twin_preempted), 1)

    @property
    def preempted_jaccard(self) -> float:
        a, b = set(self.twin_preempted), set(self.sim_preempted)
        return len(a & b) / len(a | b) if a | b else 1.0


def compare(twin: TwinRecord, sim: SimRecord, replayed: list[ReplayJob], gap_s: float = 2.0) -> Comparison:
    """Waits from each run's own admissions and the same arrivals (the twin's Workloads first seen)."""
    gpus = {j.index: j.pods * j.gpus for j in replayed}
    preempted_at: dict[int, list[float]] = {}
    for at, victim, _, _ in twin.preemptions:
        preempted_at.setdefault(victim, []).append(at)

    def held(holds: list[tuple[int, float, float, bool]]) -> float:
        return float(sum(gpus[j] * (b - a) for j, a, b, _ in holds))

    def lost(holds: list[tuple[int, float, float, bool]], until: dict[int, list[float]]) -> float:
        """GPU-seconds evicted runs held until their preemption (the simulator evicts at once; on the twin
        the quota stays held until the victim's pods are gone)."""
        total = 0.0
        for j, a, b, done in holds:
            if not done:
                end = min((t for t in until.get(j, []) if a <= t <= b), default=b)
                total += gpus[j] * (end - a)
        return total

    jobs = sorted(set(twin.admitted) & set(sim.admitted))
    shift = min(twin.created.values())  # the trace reader starts the simulator's clock at the first arrival
    tw = np.array([twin.admitted[j] - twin.created[j] for j in jobs])
    sw = np.array([sim.admitted[j] + shift - twin.created[j] for j in jobs])
    ta = np.array([twin.admitted[j] for j in jobs])
    sa = np.array([sim.admitted[j] + shift for j in jobs])
    far = np.abs(ta[:, None] - ta[None, :]) > gap_s
    agree = np.sign(ta[:, None] - ta[None, :]) == np.sign(sa[:, None] - sa[None, :])
    pairs = np.triu(far, 1)
    tw, sw = np.maximum(tw, 0), np.maximum(sw, 0)
    weight = np.array([gpus[j] for j in jobs], dtype=np.float64)
    return Comparison(
        jobs=len(jobs),
        twin_mean_wait_s=float(tw.mean()),
        sim_mean_wait_s=float(sw.mean()),
        twin_prompt_share=float((tw <= PROMPT_S).mean()),
        sim_prompt_share=float((sw <= PROMPT_S).mean()),
        twin_median_wait_s=float(median(tw)),
        sim_median_wait_s=float(median(sw)),
        twin_p95_wait_s=float(np.percentile(tw, 95)),
        sim_p95_wait_s=float(np.percentile(sw, 95)),
        order_agreement=float(agree[pairs].mean()) if pairs.any() else 1.0,
        twin_preempted=tuple(sorted(twin.preempted)),
        sim_preempted=tuple(sorted(sim.preempted)),
        twin_reasons=dict(twin.reasons),
        sim_reasons=dict(sim.reasons),
        twin_gpu_weighted_wait_s=float((tw * weight).sum() / weight.sum()),
        sim_gpu_weighted_wait_s=float((sw * weight).sum() / weight.sum()),
        twin_quota_gpu_s=held(twin.holds),
        sim_quota_gpu_s=held(sim.holds),
        twin_lost_gpu_s=lost(twin.holds, preempted_at),
        sim_lost_gpu_s=lost(sim.holds, {}),
    )
