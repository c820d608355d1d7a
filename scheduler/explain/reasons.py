"""Why one workload waits, in the team's terms, and what would let it start.

The state is Kueue's (the Workload's conditions and admission checks, kueue.x-k8s.io/v1beta2) and the
scheduler's (the pods' PodScheduled condition); the terms are the team's: its quota per pool, the teams that
borrow from it, the pool's nodes, its priority. One reason is chosen, the first that holds of:

- finished, deactivated, running (every pod bound);
- waiting for nodes, or for a topology domain once they are there: the quota is reserved but the
  ProvisioningRequest admission check or the delayed topology placement holds it (scheduler.explain.provisioning);
- fragmentation: admitted, so the quota is there, but the scheduler finds no node with the pod's GPUs free
  together (`Insufficient <gpu resource>` in its message);
- over the limit: Kueue says the request exceeds what the team's queue may ever hold there;
- pods not ready in time: admitted, but its pods did not all become ready within `waitForPodsReady.timeout`, so
  Kueue evicted it (reason `PodsReadyTimeout`) and holds it back until its requeue backoff ends
  (`status.requeueState.requeueAt`; kueue v0.19.2: the eviction "Exceeded the PodsReady timeout" in
  pkg/controller/core/workload_controller.go, `Requeued=False` with the eviction's reason in
  pkg/controller/jobframework/reconciler.go, lifted by the workload controller when the backoff is over; the
  backoff is base x 2^(n-1) for the n-th eviction, pkg/workload/workload.go `UpdateRequeueState`);
- topology: the quota is there, but no domain of the required topology level (Kueue's topology-aware
  scheduling) has room for all its pods together;
- priority: preempted by higher-priority work, or higher-priority work of the team is ahead in line;
- borrowed: other teams borrow in the pool while the team uses less than its quota there, so part of its
  guarantee is lent out and Kueue reclaims it (the compiled ClusterQueues set `reclaimWithinCohort: Any`);
- quota exhausted: the team's quota and the cohort's spare are in use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from scheduler.explain.answer import Answer, Reason
from scheduler.explain.kueue_messages import Shortage, shortages, topology_misfit
from scheduler.explain.order import condition, is_true, job_of, kueue_order, priority
from scheduler.explain.provisioning import waiting_for_nodes
from scheduler.explain.quota import PoolRow

GPU_PREFIX = "nvidia.com/"  # the GPU resources; cpu and memory have a flavor of their own


def _n(value: Decimal) -> str:
    return f"{value.normalize():f}"


def _pod_unschedulable(pods: Sequence[Mapping[str, Any]]) -> str:
    for pod in pods:
        for c in pod.get("status", {}).get("conditions", []) or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                return str(c.get("message", ""))
    return ""


def _row(rows: Sequence[PoolRow], shortage: Shortage) -> PoolRow | None:
    return next((r for r in rows if r.pool == shortage.flavor and r.resource == shortage.resource), None)


def _admitted(
    workload: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
) -> Answer:
    if not is_true(workload, "Admitted"):
        held = waiting_for_nodes(workload, events, GPU_PREFIX)
        if held is not None:
            return held
    unschedulable = _pod_unschedulable(pods)
    if "Insufficient" in unschedulable and "gpu" in unschedulable:
        flavors = {f for ps in workload["status"]["admission"].get("podSetAssignments", []) or []
                   for r, f in (ps.get("flavors") or {}).items() if r.startswith(GPU_PREFIX)}  # fmt: skip
        pool = ", ".join(sorted(flavors)) or "its pool"
        gpus = _gpus_per_pod(pods[0]) if pods else ""
        return Answer(
            Reason.FRAGMENTATION,
            f"no node of pool {pool} has {gpus or 'the'} free GPUs together: fragmentation "
            f"(the quota is there; the scheduler says: {unschedulable})",
            "fewer GPUs per pod (more pods), or wait for a job on those nodes to end; a pool that may grow gets "
            "a node from the autoscaler",
        )
    if pods and all(p.get("spec", {}).get("nodeName") for p in pods):
        nodes = ", ".join(sorted({str(p["spec"]["nodeName"]) for p in pods}))
        return Answer(Reason.RUNNING, f"admitted; its pods run on {nodes}", "")
    return Answer(Reason.STARTING, "admitted; its pods are being created and bound", "")


def _gpus_per_pod(pod: Mapping[str, Any]) -> str:
    total = Decimal(0)
    for c in pod.get("spec", {}).get("containers", []) or []:
        for name, value in (c.get("resources", {}).get("requests") or {}).items():
            if name.startswith(GPU_PREFIX):
                total += Decimal(str(value))
    return _n(total) if total else ""


def explain(
    workload: Mapping[str, Any],
    rows: Sequence[PoolRow],
    line: Sequence[Mapping[str, Any]] = (),
    pods: Sequence[Mapping[str, Any]] = (),
    events: Sequence[Mapping[str, Any]] = (),
) -> Answer:
    """One workload's reason; `rows` are its team's pool rows, `line` the team's workloads (for priority),
    `events` those on it (Kueue's `SecondPassFailed` says why a delayed topology placement failed)."""
    if is_true(workload, "Finished"):
        return Answer(Reason.FINISHED, "finished", "")
    if workload.get("spec", {}).get("active", True) is False:
        return Answer(Reason.INACTIVE, "deactivated (spec.active: false): Kueue does not queue it",
                      "set spec.active back to true, or resubmit")  # fmt: skip
    if is_true(workload, "QuotaReserved"):
        return _admitted(workload, pods, events)
    message = str((condition(workload, "QuotaReserved") or {}).get("message", ""))
    lacks = shortages(message)
    over = [s for s in lacks if s.over_maximum]
    if over and len(over) == len(lacks):  # no pool it could wait for: over the maximum everywhere it may go
        s = max(over, key=lambda o: o.maximum or Decimal(0))  # the pool the team has quota in
        return Answer(
            Reason.OVER_LIMIT,
            f"it asks {_n(s.needed + (s.maximum or 0))} {s.resource} in pool {s.flavor}, more than your team may "
            f"ever hold there ({_n(s.maximum or Decimal(0))}: quota plus borrowing limit)",
            "ask for fewer, or another pool; or ask the platform team for more quota",
        )
    backoff = _pods_ready_backoff(workload)
    if backoff is not None:
        return backoff
    misfit = topology_misfit(message)
    if misfit is not None:
        return Answer(
            Reason.TOPOLOGY,
            f"your quota is there, but no domain of topology {misfit.topology} has room for all its "
            f"{misfit.unit}s together {misfit.together}: Kueue's topology-aware placement",
            "fewer pods per gang, a preferred rather than required topology level, or wait for jobs in one "
            "domain to end",
        )
    evicted = condition(workload, "Preempted")
    if evicted and evicted.get("status") == "True":
        return Answer(Reason.PRIORITY, f"preempted ({evicted.get('reason')}): {evicted.get('message', '')}",
                      "nothing: it is back in line and starts when quota frees")  # fmt: skip
    ahead = _higher_ahead(workload, line)
    if ahead:
        return Answer(
            Reason.PRIORITY,
            f"your priority ({priority(workload)}) is below that of {len(ahead)} of your team's workloads ahead "
            f"({', '.join(ahead[:3])})",
            "wait for them, or submit with a higher priority class if the work is more urgent",
        )
    for s in (s for s in lacks if not s.over_maximum):
        row = _row(rows, s)
        if row is None:
            continue
        if row.borrowers and row.mine.used < row.mine.nominal:  # others hold part of the team's guarantee
            who = ", ".join(f"team {q} is borrowing {_n(b)}" for q, b in row.borrowers)
            return Answer(
                Reason.BORROWED,
                f"{who} of pool {s.flavor}'s {s.resource}; reclaimable now: your job fits in your quota "
                f"({_n(row.mine.used)} of {_n(row.mine.nominal)} in use)",
                "nothing: Kueue preempts the borrowed work for yours",
            )
        return Answer(
            Reason.QUOTA,
            f"your team uses {_n(row.mine.used)} of its {_n(row.mine.nominal)} {s.resource} in pool {s.flavor} "
            f"and the cohort has {_n(row.cohort_free)} free; {_n(s.needed)} more needed",
            "wait for your team's running jobs to end, or use a pool where your team has quota free",
        )
    if lacks or message:
        return Answer(
            Reason.UNKNOWN, f"waiting for quota: {message}", "wait; see `why` for Kueue's own words"
        )
    return Answer(Reason.UNKNOWN, "not yet considered by Kueue", "wait a few seconds")


def _pods_ready_backoff(workload: Mapping[str, Any]) -> Answer | None:
    """Evicted because its pods were not all ready in time, and still in its requeue backoff."""
    requeued = condition(workload, "Requeued")
    if not requeued or requeued.get("status") != "False" or requeued.get("reason") != "PodsReadyTimeout":
        return None
    state = workload.get("status", {}).get("requeueState") or {}
    at = f" at {state['requeueAt']}" if state.get("requeueAt") else ""
    times = int(state.get("count") or 1)
    return Answer(
        Reason.PODS_READY,
        f"its pods did not all become ready within the waitForPodsReady timeout, so Kueue gave its quota back; "
        f"it is requeued{at} (evicted {times} time{'s' if times != 1 else ''} so far, the wait doubling each time)",
        "nothing if it was bad luck; if it repeats, its pods cannot all start together: look at `why` for the "
        "scheduler's message (fragmentation, an image that pulls slowly, a node selector no node matches)",
    )


def _higher_ahead(workload: Mapping[str, Any], line: Sequence[Mapping[str, Any]]) -> list[str]:
    order = kueue_order(line)
    names = [str(w["metadata"]["name"]) for w in order]
    me = str(workload["metadata"]["name"])
    if me not in names:
        return []
    return [job_of(w) for w in order[: names.index(me)] if priority(w) > priority(workload)]
