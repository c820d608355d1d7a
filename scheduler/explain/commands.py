"""`quota`, `queue` and `why`: read what the caller may read, explain it (the pure rooms), print text, and record
each answer as an Event on its Workload when the caller may create events.

Each command is one function of (kubectl, namespace, ...) -> the text to print, shared by the `kubectl
gpufleet` plugin and the `invoke` tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from scheduler.explain.answer import Answer
from scheduler.explain.cluster import ClusterError, Kubectl
from scheduler.explain.events import answer_event
from scheduler.explain.order import is_true, job_of, kueue_order, pending_positions, positions, priority
from scheduler.explain.quota import PoolRow, cohort_parents, team_rows
from scheduler.explain.reasons import GPU_PREFIX, explain

VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues/{lq}/pendingworkloads"


@dataclass(frozen=True)
class Team:
    """What the caller's namespace holds: its LocalQueues' ClusterQueues, its pool rows, its Workloads and pods."""

    namespace: str
    queues: dict[str, str]  # LocalQueue -> ClusterQueue
    rows: list[PoolRow]
    workloads: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    events: list[dict[str, Any]]  # Kueue's among them say why a reserved workload is not yet admitted


def read_team(kubectl: Kubectl, namespace: str) -> Team:
    ns = namespace or kubectl.namespace()
    if not ns:
        raise ClusterError(
            "no namespace: pass -n NAMESPACE (your team's), or set one in your kubeconfig context", 2
        )
    local = kubectl.get("localqueues.kueue.x-k8s.io", "-n", ns).get("items", [])
    if not local:
        raise ClusterError(
            f"namespace {ns} has no Kueue LocalQueue: is it your team's namespace? (-n NAMESPACE)", 2
        )
    queues = {lq["metadata"]["name"]: lq["spec"]["clusterQueue"] for lq in local}
    cluster_queues = kubectl.get("clusterqueues.kueue.x-k8s.io").get("items", [])
    mine = [q for q in cluster_queues if q["metadata"]["name"] in set(queues.values())]
    parents = cohort_parents(kubectl.get("cohorts.kueue.x-k8s.io").get("items", []))
    rows = [
        r for q in mine for r in team_rows(q, cluster_queues, parents) if r.resource.startswith(GPU_PREFIX)
    ]
    workloads = kubectl.get("workloads.kueue.x-k8s.io", "-n", ns).get("items", [])
    pods = kubectl.get("pods", "-n", ns).get("items", [])
    events = kubectl.get("events", "-n", ns).get("items", [])
    return Team(ns, queues, rows, workloads, pods, events)


def _n(value: Decimal | None) -> str:
    return "-" if value is None else f"{value.normalize():f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=False)).rstrip()
                     for line in [header, *rows])  # fmt: skip


def quota(kubectl: Kubectl, namespace: str = "") -> str:
    """The team's guarantee, use, borrowing and lending per pool, and what its cohort has free now."""
    team = read_team(kubectl, namespace)
    header = (
        "POOL",
        "RESOURCE",
        "QUOTA",
        "IN USE",
        "BORROWED",
        "LENDS",
        "MAX",
        "COHORT FREE",
        "BORROWED BY OTHERS",
    )
    body = [
        (r.pool, r.resource, _n(r.mine.nominal), _n(r.mine.used), _n(r.mine.borrowed), _n(r.lent), _n(r.maximum),
         _n(r.cohort_free), ", ".join(f"{q} {_n(b)}" for q, b in r.borrowers) or "-")
        for r in sorted(team.rows, key=lambda r: (r.pool, r.resource))
        if r.mine.nominal or r.mine.used or r.cohort_free  # not a resource no one has in that pool
    ]  # fmt: skip
    return (
        f"namespace {team.namespace}: GPUs per pool (MAX: quota + borrowing limit; -: no limit)\n"
        + _table(header, body)
    )


def pods_of(workload: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    owners = {ref.get("uid") for ref in workload["metadata"].get("ownerReferences", []) or []}
    return [
        p for p in pods if owners & {ref.get("uid") for ref in p["metadata"].get("ownerReferences", []) or []}
    ]


def record_events(kubectl: Kubectl, team: Team, answers: Sequence[tuple[Mapping[str, Any], Answer]]) -> str:
    if not answers:
        return ""
    if not kubectl.can_i("create", "events", team.namespace):
        return f"(not recorded as Events: you may not create events in {team.namespace})"
    refused = [kubectl.create(answer_event(wl, a)) for wl, a in answers]
    failed = [r for r in refused if r]
    if failed:
        return f"(not recorded as Events: {failed[0]})"
    return f"(recorded as an Event on each Workload: kubectl describe workload -n {team.namespace} NAME)"


def _positions(kubectl: Kubectl, team: Team) -> tuple[dict[str, int], str]:
    found: dict[str, int] = {}
    for lq in sorted(team.queues):
        served = kubectl.raw(VISIBILITY.format(ns=team.namespace, lq=lq))
        if served is None:
            return _own_positions(team), "your team's Workloads in Kueue's order"
        found.update(pending_positions(served))
    return found, "Kueue's visibility API"


def _own_positions(team: Team) -> dict[str, int]:
    """Positions in each of the team's ClusterQueues (a LocalQueue's workloads wait in its ClusterQueue)."""
    found: dict[str, int] = {}
    for cq in set(team.queues.values()):
        lqs = {lq for lq, target in team.queues.items() if target == cq}
        found.update(positions(w for w in team.workloads if w.get("spec", {}).get("queueName") in lqs))
    return found


def held(workloads: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Workloads past Kueue's line, their quota reserved, that are not admitted yet: they wait for the nodes
    the autoscaler provisions, or for their topology placement (scheduler.explain.provisioning)."""
    return [w for w in workloads if is_true(w, "QuotaReserved") and not is_true(w, "Admitted")
            and not is_true(w, "Finished") and w.get("spec", {}).get("active", True) is not False]  # fmt: skip


def queue(kubectl: Kubectl, namespace: str = "", record: bool = True) -> str:
    """The team's pending workloads in Kueue's order: position, priority, the reason, what would let it start."""
    team = read_team(kubectl, namespace)
    places, source = _positions(kubectl, team)
    pending = [*held(team.workloads), *kueue_order(team.workloads)]
    if not pending:
        return f"namespace {team.namespace}: nothing waiting"
    answers = [
        (wl, explain(wl, team.rows, team.workloads, pods_of(wl, team.pods), team.events)) for wl in pending
    ]
    past = (
        "; -: past the line, its quota reserved" if any(is_true(w, "QuotaReserved") for w in pending) else ""
    )
    lines = [f"namespace {team.namespace}: {len(pending)} waiting (positions from {source}; 0 is next{past})"]
    for wl, a in answers:
        name = str(wl["metadata"]["name"])
        place = "-" if is_true(wl, "QuotaReserved") else places.get(name, "?")
        lines.append(f"{place!s:>3}  {job_of(wl)}  priority {priority(wl)}  [{a.reason.value}] {a.says}")
        lines.append(f"     to start: {a.to_start}")
    if record:
        lines.append(record_events(kubectl, team, answers))
    return "\n".join(line for line in lines if line)


def find_workload(team: Team, job: str) -> dict[str, Any]:
    """The Workload named `job`, or the one a job of that name owns."""
    for wl in team.workloads:
        if wl["metadata"]["name"] == job:
            return wl
    for wl in team.workloads:
        if any(ref.get("name") == job for ref in wl["metadata"].get("ownerReferences", []) or []):
            return wl
    raise ClusterError(f"JOB: no job or Workload named {job!r} in namespace {team.namespace}", 2)


def why(kubectl: Kubectl, job: str, namespace: str = "", record: bool = True) -> str:
    """One workload's story: its reason, place in line, admission checks, preemptions, the pods' nodes."""
    team = read_team(kubectl, namespace)
    wl = find_workload(team, job)
    pods = pods_of(wl, team.pods)
    a = explain(wl, team.rows, team.workloads, pods, team.events)
    name = str(wl["metadata"]["name"])
    status = wl.get("status", {})
    lines = [f"{job_of(wl)}: workload {name} (queue {wl.get('spec', {}).get('queueName', '?')}, priority {priority(wl)})",
             f"  reason:   [{a.reason.value}] {a.says}"]  # fmt: skip
    if a.to_start:
        lines.append(f"  to start: {a.to_start}")
    places, source = _positions(kubectl, team)
    if name in places:
        lines.append(f"  position: {places[name]} (0 is next; from {source})")
    for c in status.get("conditions", []) or []:
        lines.append(
            f"  {c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
        )
    for check in status.get("admissionChecks", []) or []:
        lines.append(
            f"  admission check {check['name']}: {check.get('state')} {check.get('message', '')}".rstrip()
        )
    for p in pods:
        node = p.get("spec", {}).get("nodeName") or "not bound"
        lines.append(f"  pod {p['metadata']['name']}: {p.get('status', {}).get('phase', '?')} on {node}")
    if record:
        lines.append(record_events(kubectl, team, [(wl, a)]))
    return "\n".join(line for line in lines if line)
