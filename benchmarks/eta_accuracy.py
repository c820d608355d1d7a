"""How right `eta` is: on the twin, scripted time-scaled arrivals for three teams with known durations; the
estimate made (as a dry run, as each team's member) the moment each job is submitted is compared with when
the real Kueue admitted it.

Usage: python benchmarks/eta_accuracy.py [--seeds 1,2,3] [--jobs 40] [--rate 0.2] [--durations 20,60]
                                       [--runs 20] [--json FILE]

Results of the last run are recorded in benchmarks/eta_accuracy.md.

The stack is the metal stack with its H100 pool only (4 nodes of 8 GPUs, every node up) and three teams,
vision 12, nlp 12 and speech 8 GPUs, each borrowing up to 8, with Kueue's classical preemption (fair sharing
off). The jobs are ``twin.dynamic_replay.scaled_trace``'s (Poisson arrivals at ``--rate`` per second, 1/2/4/8
GPUs a pod, one in four a gang of two, mostly the default priority class), each Job carrying its duration as
the `gpufleet.io/expected-duration` hint and as the annotation kwok completes its pods by.

Before each job is created, its team's member (impersonated with only the team's group, as
tests/twin/test_team_eta.py does) asks `eta -f` for it: the seeding reads what that member may read (their
team's Workloads and Jobs, every ClusterQueue's use; not the nodes, not the other teams' Workloads), and the
p50 and p90 of ``--runs`` simulator runs are taken. Right after it, the same is read with the benchmark's own
admin kubeconfig, the platform team's full view (every team's Workloads, Jobs and pods, the nodes), and
estimated the same way: the two are compared on the same actual starts, and the difference is what the
member cannot read. Beside them, a null estimator: (the team's jobs waiting ahead of it at its priority or
higher, plus one if the pool has fewer free GPUs than it asks) x the mean duration of the team's finished
jobs.

The estimate is of a start "were it submitted now", counted from the moment `eta` takes as now (`Live.now`,
taken when its reads end; its answer says the start as that moment plus the p50), recorded per view (`now`,
`full_now`); the member's reads come first, then the full view's, and the job is created right after both,
so the member's estimate is a few seconds older at the create. The simulations are made once the seed's run
is over, from the states read, so that no estimate delays a submission.

Measured per job: the actual wait (Kueue's first admission, as a watch on Workloads sees it, less the moment
before the create) and each estimator's absolute error of the start (`p50` the member's, `full_p50` the full
view's, `null`). Targets, over the jobs that waited at
least MIN_WAIT_S: the median absolute error <= 25 % of the actual wait, the 90th percentile <= 50 %.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.stackfile import load_stack  # noqa: E402
from scheduler.explain.cluster import Kubectl  # noqa: E402
from scheduler.explain.commands import read_team  # noqa: E402
from scheduler.explain.durations import HINT, finished_jobs  # noqa: E402
from scheduler.explain.eta import estimate  # noqa: E402
from scheduler.explain.order import kueue_order, priority  # noqa: E402
from scheduler.explain.seed import Entry, Live, Seed, manifest_entry, seed  # noqa: E402
from scheduler.explain.when import read_live  # noqa: E402
from twin import launch  # noqa: E402
from twin.dynamic_replay import ReplayJob, TwinRecord, WorkloadWatch, job_object, scaled_trace  # noqa: E402

TEAMS = {"vision": 12, "nlp": 12, "speech": 8}
MIN_WAIT_S = 5.0  # jobs admitted sooner count for the absolute errors, not for the relative targets
TARGET_P50, TARGET_P90 = 0.25, 0.50


def stack_file(folder: Path) -> Path:
    """The metal stack with its H100 pool only and three teams (fair sharing off: classical preemption)."""
    doc = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    config = doc["config"]
    config["gpufleet:nodePools"] = [p for p in config["gpufleet:nodePools"] if p["name"] == "h100"]
    config["gpufleet:teams"] = [{"name": t, "quotas": {"h100": q}, "borrowingLimit": 8, "groups": [f"{t}-team"],
                                 "priority": "production"} for t, q in TEAMS.items()]  # fmt: skip
    config["gpufleet:scheduling"] = {**config.get("gpufleet:scheduling", {}), "fairSharing": False}
    path = folder / "Pulumi.eta-accuracy.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def null_estimate(live: Live, state: Seed, entry: Entry) -> float:
    """(the team's waiting jobs ahead at its priority or higher + 1 if the pool lacks free GPUs for it) x the
    mean duration of the team's finished jobs (0 before any has finished)."""
    ahead = [w for w in kueue_order(live.workloads) if priority(w) >= entry.priority]
    pool = entry.pools[0]
    used = sum(e.gpus for e in state.entries if e.pool == pool)
    full = sum(state.pools.get(pool, ())) - used < entry.gpus
    done = [f.seconds for f in finished_jobs(live.jobs)][-20:]
    return (len(ahead) + int(full)) * (float(np.mean(done)) if done else 0.0)


def hinted(job: ReplayJob) -> dict[str, Any]:
    obj = job_object(job)
    obj["metadata"]["annotations"] = {HINT: f"{job.duration:g}s"}
    return obj


def one_run(binary: Path, kubeconfig: Path, jobs: list[ReplayJob], runs: int,
            then: Sequence[ReplayJob] = ()) -> list[dict[str, Any]]:  # fmt: skip
    """Submit each job at its arrival, estimating it first, then the jobs of `then` at theirs without an
    estimate (work that goes on arriving, as on a cluster that does not stop when the measured jobs do);
    return per measured job its wait and the estimates."""
    base = [str(binary), f"--kubeconfig={kubeconfig}"]
    record = TwinRecord()
    t0 = [time.monotonic(), time.time()]
    watch = WorkloadWatch([*base, "get", "workloads.kueue.x-k8s.io", "-A", "-w", "-o", "json",
                           "--output-watch-events"], record, t0)  # fmt: skip
    watch.start()
    rows: dict[int, dict[str, Any]] = {}
    read: dict[int, tuple[ReplayJob, Live, Live]] = {}
    admin = Kubectl.of(str(binary), str(kubeconfig))  # the platform team's kubeconfig: the full view
    try:
        t0[0], t0[1] = time.monotonic(), time.time()
        for job in [*jobs, *then]:
            delay = job.arrival - (time.monotonic() - t0[0])
            if delay > 0:
                time.sleep(delay)
            if job.index >= len(jobs):
                created = subprocess.run([*base, "create", "-f", "-"], input=json.dumps(hinted(job)),
                                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
                if created.returncode != 0:
                    raise RuntimeError(f"kubectl create job {job.name}: {created.stderr.strip()}")
                continue
            member = Kubectl.of(
                str(binary), str(kubeconfig), user="bench@example.com", groups=(f"{job.team}-team",)
            )
            asked = time.monotonic() - t0[0]
            live = read_live(member, read_team(member, job.team))
            asked_full = time.monotonic() - t0[0]
            full = read_live(admin, read_team(admin, job.team))
            submitted = time.monotonic() - t0[0]
            done = subprocess.run([*base, "create", "-f", "-"], input=json.dumps(hinted(job)), capture_output=True,
                                  text=True, timeout=60, check=False)  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"kubectl create job {job.name}: {done.stderr.strip()}")
            read[job.index] = (job, live, full)
            rows[job.index] = {"job": job.index, "team": job.team, "gpus": job.gpus * job.pods,
                               "priority": job.priority, "asked": asked, "asked_full": asked_full,
                               "submitted": submitted, "now": live.now.timestamp() - t0[1],
                               "full_now": full.now.timestamp() - t0[1]}  # fmt: skip
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            with watch.lock:
                if all(job.index in record.admitted for job in jobs):
                    break
            time.sleep(1)
    finally:
        watch.stop()
        for ns in TEAMS:
            subprocess.run([*base, "delete", "jobs", "-n", ns, "--all", "--wait=true"], capture_output=True,
                           check=False, timeout=300)  # fmt: skip
    for j, row in rows.items():
        row["admitted"] = record.admitted.get(j)
        row.update(estimates(*read[j], runs))
    return list(rows.values())


def estimates(job: ReplayJob, live: Live, full: Live, runs: int) -> dict[str, Any]:
    """The member's estimate, the full view's and the null one, of the state each read just before the create
    (simulated once the run is over, so that no estimate delays a submission)."""
    out: dict[str, Any] = {}
    for key, view in (("", live), ("full_", full)):
        began = time.monotonic()
        entry = manifest_entry(hinted(job), view)
        state = seed(view, entry)
        found = estimate(state, len(state.entries) - 1, finished_jobs(view.jobs), runs)
        out |= {f"{key}p50_s": found.p50_s, f"{key}p90_s": found.p90_s, f"{key}estimate_s": time.monotonic() - began,
                f"{key}view": found.assumed[0]}  # fmt: skip
        if not key:
            out["null_s"] = null_estimate(live, state, entry)
    return out


def clock(row: dict[str, Any], view: str = "") -> float:
    """When a view's estimate counts from (`view` "" the member's, "full_" the full view's), on the run's clock:
    `eta`'s now, taken when its reads end. Rows recorded before it was kept take the next step's start: the
    member's at the full view's first read (`asked_full`), the full view's at the create, each within
    milliseconds of it; in the runs before the full view (no `asked_full`) the member's estimate was
    simulated before the create, so the create is up to that simulation's time (tenths of a second) late."""
    if f"{view}now" in row:
        return float(row[f"{view}now"])
    return float(row["asked_full"] if not view and "asked_full" in row else row["submitted"])


def said_from(row: dict[str, Any], key: str, origin: float) -> float:
    """The start an estimate says counted from `origin`: the seconds it gives after it, and the job cannot start
    before it was created (inf: it did not start in the simulated future)."""
    value = row[key]
    return np.inf if value is None else max(origin + value, row["submitted"])


def predicted(row: dict[str, Any], key: str, view: str = "") -> float:
    """The start an estimate says: from its view's `clock`."""
    return said_from(row, key, clock(row, view))


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per estimator: the absolute errors (s) of all jobs, and relative to the wait of those that waited; how
    often the job started by the p90; how long an estimate took."""
    done = [r for r in rows if r["admitted"] is not None]
    out: dict[str, Any] = {"jobs": len(rows), "admitted": len(done)}
    waits = np.array([r["admitted"] - r["submitted"] for r in done])
    actual = np.array([r["admitted"] for r in done])
    waited = waits >= MIN_WAIT_S
    out["waited"] = int(waited.sum())
    out["wait_p50_s"] = float(np.median(waits[waited])) if waited.any() else None
    for name in ("p50_s", "full_p50_s", "null_s"):
        view = "full_" if name.startswith("full_") else ""
        err = np.abs(np.array([predicted(r, name, view) for r in done]) - actual)
        rel = err[waited] / waits[waited]
        out[name.removesuffix("_s")] = {
            "abs_p50_s": float(np.median(err)),
            "abs_p90_s": float(np.percentile(err, 90)),
            "rel_p50": float(np.median(rel)) if len(rel) else None,
            "rel_p90": float(np.percentile(rel, 90)) if len(rel) else None,
        }
    for key in ("", "full_"):
        p90 = np.array([predicted(r, f"{key}p90_s", key) for r in done])
        out[f"{key}started_by_p90"] = float((actual <= p90 + 1.0).mean())
        out[f"{key}estimate_s_p50"] = float(np.median([r[f"{key}estimate_s"] for r in rows]))
    return out


def then_jobs(jobs: list[ReplayJob], args: argparse.Namespace, seed_value: int,
              durations: tuple[float, float]) -> list[ReplayJob]:  # fmt: skip
    """`--then` jobs of another trace seed (so the measured jobs stay those of the earlier runs), arriving at
    the same rate after the last measured one, numbered after them."""
    if not args.then:
        return []
    more = scaled_trace(list(TEAMS), jobs=args.then, rate_per_s=args.rate, duration_s=durations,
                        seed=seed_value + 1000)  # fmt: skip
    start = jobs[-1].arrival + 1.0 / args.rate
    return [replace(j, index=len(jobs) + j.index, arrival=round(start + j.arrival, 3)) for j in more]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="trace seeds, one run each")
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--rate", type=float, default=0.2, help="arrivals per second")
    parser.add_argument("--durations", default="20,60", help="job durations, uniform in MIN,MAX seconds")
    parser.add_argument("--runs", type=int, default=20, help="simulator runs per estimate")
    parser.add_argument("--then", type=int, default=0,
                        help="jobs submitted after the measured ones, not estimated (another seed's, at the same "
                        "rate): work keeps arriving while the last measured jobs wait")  # fmt: skip
    parser.add_argument("--json", default="", help="write every row and the summaries here")
    args = parser.parse_args()
    lo, hi = (float(x) for x in args.durations.split(","))
    folder = Path(tempfile.mkdtemp(prefix="eta-accuracy-"))
    path = stack_file(folder)
    log = (folder / "twin.out").open("wb")
    twin = launch.start(path, load_stack(path), folder / "twin", time_scale="0.01", stdout=log,
                        lock=folder / "twin.lock", say=lambda _line: None)  # fmt: skip
    results: dict[str, Any] = {"config": vars(args), "runs": {}}
    try:
        binary = Path(twin.info["kubectl"])
        for s in (int(x) for x in args.seeds.split(",")):
            jobs = scaled_trace(
                list(TEAMS), jobs=args.jobs, rate_per_s=args.rate, duration_s=(lo, hi), seed=s
            )
            rows = one_run(binary, twin.kubeconfig, jobs, args.runs, then_jobs(jobs, args, s, (lo, hi)))
            results["runs"][s] = {"summary": summary(rows), "rows": rows}
            print(f"seed {s}:", json.dumps(results["runs"][s]["summary"]), flush=True)
    finally:
        twin.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
