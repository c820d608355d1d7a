"""`eta`: when a waiting job starts (or, for a manifest not yet submitted, would start), read with the caller's
own access, estimated by ``eta`` from the state ``seed`` models, printed, and recorded as an Event on the
Workload.

What the caller may read decides what the estimate sees: nodes, other teams' Workloads, Jobs and pods are read
only where their role allows (the platform team's full view; a team member's is their own team's), and the
answer says which view it used and what it could not see.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.explain.answer import Answer, Reason
from scheduler.explain.cluster import ClusterError, Kubectl
from scheduler.explain.commands import Team, find_workload, pods_of, read_team, record_events
from scheduler.explain.durations import HintError, finished_jobs
from scheduler.explain.eta import Estimate, estimate
from scheduler.explain.order import is_true, job_of, priority
from scheduler.explain.quota import cohort_parents
from scheduler.explain.reasons import explain
from scheduler.explain.seed import Everyone, Live, SeedError, manifest_entry, seed


def read_everyone(kubectl: Kubectl) -> Everyone | None:
    """Every namespace's Workloads, Jobs, LocalQueues and pods, where the caller may list Workloads in all of
    them (the platform team's access); None where that is refused (a team member: RBAC Forbidden)."""
    try:
        workloads = kubectl.get("workloads.kueue.x-k8s.io", "-A").get("items", [])
        local_queues: dict[str, dict[str, str]] = {}
        for lq in kubectl.get("localqueues.kueue.x-k8s.io", "-A").get("items", []):
            meta = lq["metadata"]
            local_queues.setdefault(str(meta.get("namespace", "")), {})[str(meta["name"])] = str(
                (lq.get("spec") or {}).get("clusterQueue", "")
            )
        jobs = kubectl.get("jobs.batch", "-A").get("items", [])
        pods = kubectl.get("pods", "-A").get("items", [])
    except ClusterError:
        return None
    return Everyone(local_queues, workloads, jobs, pods)


def read_live(kubectl: Kubectl, team: Team, now: datetime | None = None) -> Live:
    """Everything the estimate reads, with the caller's access; nodes only where their role may list them, and
    every team's Workloads (the full view) only where it may list those."""
    try:
        nodes: list[dict[str, Any]] | None = kubectl.get("nodes").get("items", [])
    except ClusterError:
        nodes = None
    everyone = read_everyone(kubectl)
    classes = kubectl.get("workloadpriorityclasses.kueue.x-k8s.io").get("items", [])
    return Live(
        namespace=team.namespace,
        local_queues=team.queues,
        cluster_queues=kubectl.get("clusterqueues.kueue.x-k8s.io").get("items", []),
        cohort_parents=cohort_parents(kubectl.get("cohorts.kueue.x-k8s.io").get("items", [])),
        flavors=kubectl.get("resourceflavors.kueue.x-k8s.io").get("items", []),
        nodes=nodes,
        workloads=team.workloads,
        jobs=kubectl.get("jobs.batch", "-n", team.namespace).get("items", []),
        priority_classes={str(c["metadata"]["name"]): int(c.get("value", 0)) for c in classes},
        now=now or datetime.now(UTC),
        everyone=everyone,
    )


def _when(seconds: float | None, now: datetime) -> str:
    if seconds is None:
        return "not within the simulated future"
    at = (now + timedelta(seconds=seconds)).strftime("%H:%M:%S UTC")
    if seconds < 120:
        return f"in {seconds:.0f} s ({at})"
    if seconds < 2 * 3600:
        return f"in {seconds / 60:.0f} min ({at})"
    return f"in {seconds / 3600:.1f} h ({at})"


def sentence(found: Estimate, now: datetime) -> str:
    """The estimate in one line: p50 and p90 and over how many runs."""
    runs = "1 simulated run (every time known)" if found.runs == 1 else f"{found.runs} simulated runs"
    never = f"; it did not start in {found.never} of them" if found.never else ""
    return f"estimated start {_when(found.p50_s, now)} (p50), {_when(found.p90_s, now)} (p90); {runs}{never}"


def _lines(found: Estimate, now: datetime) -> list[str]:
    lines = [f"  {sentence(found, now)}"]
    lines += [f"  assumed: {a}" for a in found.assumed]
    lines += [f"  could not see: {u}" for u in found.unseen]
    return lines


def eta(kubectl: Kubectl, job: str, namespace: str = "", record: bool = True, runs: int = 20) -> str:
    """A submitted job's estimated start; an admitted or finished one says so."""
    team = read_team(kubectl, namespace)
    wl = find_workload(team, job)
    name = str(wl["metadata"]["name"])
    head = f"{job_of(wl)}: workload {name} (queue {wl.get('spec', {}).get('queueName', '?')}, priority {priority(wl)})"
    if is_true(wl, "QuotaReserved") or is_true(wl, "Finished"):
        a = explain(wl, team.rows, team.workloads, pods_of(wl, team.pods), team.events)
        started = is_true(wl, "Admitted") or is_true(wl, "Finished")
        where = (
            "already started" if started else "past the line, its quota reserved (no estimate of its nodes)"
        )
        return f"{head}\n  {where}: [{a.reason.value}] {a.says}"
    live = read_live(kubectl, team)
    try:
        state = seed(live)
        target = state.index(name)
        found = estimate(state, target, finished_jobs(live.jobs), runs)
    except (SeedError, HintError, StopIteration) as exc:
        raise ClusterError(f"cannot estimate {job}: {exc or 'it asks no GPUs of its queue'}", 2) from None
    lines = [head, *_lines(found, live.now)]
    if record:
        message = "; ".join([sentence(found, live.now), *found.assumed, *found.unseen])
        lines.append(record_events(kubectl, team, [(wl, Answer(Reason.ESTIMATE, message, ""))]))
    return "\n".join(line for line in lines if line)


def eta_manifest(kubectl: Kubectl, manifest: Mapping[str, Any], namespace: str = "", runs: int = 20) -> str:
    """A dry run: when a Job not yet submitted would start, were it submitted now (nothing is created)."""
    ns = namespace or str((manifest.get("metadata") or {}).get("namespace") or "")
    team = read_team(kubectl, ns)
    live = read_live(kubectl, team)
    try:
        extra = manifest_entry(manifest, live)
        state = seed(live, extra)
        found = estimate(state, len(state.entries) - 1, finished_jobs(live.jobs), runs)
    except (SeedError, HintError) as exc:
        raise ClusterError(str(exc), 2) from None
    head = f"{extra.name}: queue {extra.queue}, {extra.pods} pod(s) x {extra.units} GPUs, priority {extra.priority}"
    return "\n".join([head, *_lines(found, live.now), "  (a dry run: nothing was submitted or recorded)"])
