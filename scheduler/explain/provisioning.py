"""Why a workload that holds its quota is not yet admitted: the nodes Kueue asked the autoscaler for, or the
topology domain Kueue places its pods in once they are there (kueue v0.19.2).

A ClusterQueue with the ProvisioningRequest admission check reserves the quota first, then creates one
ProvisioningRequest per Workload and admits it only when every check is Ready. The check's state is what a
team member can read (the team's `edit` role gives no access to ProvisioningRequests); Kueue copies the
request's state into it (pkg/controller/admissionchecks/provisioning/controller.go, `syncCheckStates`):
- `Pending` with no message: the request is created and the autoscaler has not answered;
- `Pending` with the request's `Provisioned=False` message: cluster-autoscaler found no capacity for every pod
  at once (best-effort-atomic-scale-up: `CapacityIsNotFound`, "Capacity is not found, CA will try to find it
  later.", cluster-autoscaler 1.35.2 provisioningrequest/conditions/conditions.go) and tries again after its
  back-off;
- `Ready`: provisioned (or found in the cluster);
- `Retry` ("Retrying after booking expired: ...", or "... after failure: ..."): the booking ran out (10 min,
  processors/provreq/processor.go) or the request failed before the pods were placed; Kueue creates a new
  request after its back-off (`status.requeueState.requeueAt`, from 60 s doubling, three times, then `Rejected`).

With the check Ready, a pod set on a topology-aware flavor still waits for its topology assignment: Kueue delays
it until provisioning is done (pkg/scheduler/flavorassigner/tas_flavorassigner.go `podSetTopologyRequest`,
`delayedTopologyRequest: Pending`) and assigns it in a second scheduling pass, which only sees nodes that have
joined. A failed pass leaves the quota reserved and says why only in a `SecondPassFailed` Warning Event on the
Workload (pkg/scheduler/scheduler.go `requeueAndUpdate`), in the flavor assigner's words: for a pod set that
requires a topology level, "topology ... allows to fit only k out of n pod(s)" names the topology-domain cause;
for one that does not, such a message only says the provisioned nodes have not joined yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.explain.answer import Answer, Reason
from scheduler.explain.kueue_messages import TopologyMisfit, topology_misfit

CAPACITY_NOT_FOUND = "Capacity is not found"  # the start of CapacityIsNotFound's message (conditions.go)
SECOND_PASS_FAILED = "SecondPassFailed"
_WAIT = "nothing: it starts when the nodes are ready"


def _pool(workload: Mapping[str, Any], gpu_prefix: str) -> str:
    admission = workload.get("status", {}).get("admission") or {}
    flavors = {f for ps in admission.get("podSetAssignments", []) or []
               for r, f in (ps.get("flavors") or {}).items() if r.startswith(gpu_prefix)}  # fmt: skip
    return ", ".join(sorted(flavors)) or "its pool"


def _pods(workload: Mapping[str, Any]) -> int:
    return sum(int(ps.get("count", 1)) for ps in workload.get("spec", {}).get("podSets", []) or [])


def _topology_pending(workload: Mapping[str, Any]) -> bool:
    """Kueue's `HasTopologyAssignmentsPending` (pkg/workload/workload.go)."""
    admission = workload.get("status", {}).get("admission") or {}
    return any(ps.get("delayedTopologyRequest") == "Pending" and not ps.get("topologyAssignment")
               for ps in admission.get("podSetAssignments", []) or [])  # fmt: skip


def _requires_topology(workload: Mapping[str, Any]) -> bool:
    return any((ps.get("topologyRequest") or {}).get("required")
               for ps in workload.get("spec", {}).get("podSets", []) or [])  # fmt: skip


def _when(event: Mapping[str, Any]) -> str:
    series = event.get("series") or {}
    return str(series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
               or event.get("metadata", {}).get("creationTimestamp") or "")  # fmt: skip


def second_pass_said(workload: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> str:
    """The message of the latest `SecondPassFailed` Event on this Workload ("" if none)."""
    uid = workload["metadata"].get("uid")
    mine = [e for e in events if e.get("reason") == SECOND_PASS_FAILED
            and (e.get("involvedObject") or e.get("regarding") or {}).get("uid") == uid]  # fmt: skip
    if not mine:
        return ""
    latest = max(mine, key=_when)
    return str(latest.get("note") or latest.get("message") or "")


def _misfit_answer(misfit: TopologyMisfit, note: str) -> Answer:
    return Answer(
        Reason.TOPOLOGY,
        f"your quota is there and its nodes are provisioned, but no domain of topology {misfit.topology} has room "
        f"for all its {misfit.unit}s together {misfit.together}: Kueue's topology-aware "
        f"placement{note}",
        "fewer pods per gang, a preferred rather than required topology level, or wait for jobs in one domain "
        "to end; nodes just provisioned for it may still be joining",
    )


def waiting_for_nodes(
    workload: Mapping[str, Any], events: Sequence[Mapping[str, Any]], gpu_prefix: str
) -> Answer | None:
    """The answer for a workload with its quota reserved but not admitted, or None when nothing of this holds."""
    checks = workload.get("status", {}).get("admissionChecks", []) or []
    pool, pods = _pool(workload, gpu_prefix), _pods(workload)
    at = (workload.get("status", {}).get("requeueState") or {}).get("requeueAt")
    retry = next((c for c in checks if c.get("state") == "Retry"), None)
    said = second_pass_said(workload, events) if _topology_pending(workload) else ""
    misfit = topology_misfit(said) if said and _requires_topology(workload) else None
    if misfit is not None:
        note = (
            f"; the autoscaler's booking ran out meanwhile and Kueue asks again at {at}"
            if retry and at
            else ""
        )
        return _misfit_answer(misfit, note)
    pending = [c for c in checks if c.get("state") == "Pending"]
    for check in pending:
        message = str(check.get("message") or "")
        if message.startswith(CAPACITY_NOT_FOUND):
            return Answer(
                Reason.PROVISIONING,
                f"waiting for nodes: the autoscaler found no capacity in pool {pool} for all its {pods} pods at "
                f"once (the pool is at its maximum size, or has no instances to add) and tries again after a "
                f"back-off; your quota stays reserved ({check['name']}: {message})",
                "fewer pods, or wait for nodes of the pool to free up; ask the platform team if the pool "
                "should grow",
            )
        if not message:
            return Answer(Reason.PROVISIONING, f"waiting for nodes: Kueue asked the autoscaler for pool {pool}'s "
                          f"nodes for its {pods} pods ({check['name']}); no answer yet", _WAIT)  # fmt: skip
        return Answer(Reason.PROVISIONING, f"waiting for nodes: the autoscaler is provisioning pool {pool} "
                      f"({check['name']}: {message})", _WAIT)  # fmt: skip
    if retry is not None:
        when = f"; Kueue asks the autoscaler again at {at}" if at else ""
        return Answer(
            Reason.PROVISIONING,
            f"waiting for nodes: the autoscaler's nodes in pool {pool} were not ready for its pods in time "
            f"({retry['name']}: {retry.get('message', '')}){when}",
            _WAIT,
        )
    if _topology_pending(workload):
        return Answer(
            Reason.PROVISIONING,
            f"waiting for nodes: the autoscaler has provisioned pool {pool} for it; Kueue places its pods once "
            f"the nodes join the cluster" + (f" (Kueue says: {said})" if said else ""),
            _WAIT,
        )
    return None
