"""Idle GPU reclaim that cannot hurt a job: which Kueue workloads to warn, which to deactivate, and why not.

Deactivation is Kueue's own mechanism: `spec.active: false` on the Workload (v1beta2 `WorkloadSpec.Active`:
"false indicates that a workload should never be admitted and evicts running workloads"). It evicts at once:
a batch Job is suspended and its pods get only their termination grace, so reclaim is built to be safe first:

- opt-in per team (`teams[].reclaimIdle`), with `monitoring.reclaimIdle` as the master switch for `--apply`;
- opt-out per workload: `gpufleet.io/reclaim: "never"` on the Workload, its job or any owner of its pods,
  honoured only for teams the platform lets opt out (`teams[].reclaimIdle.allowOptOut`, off by default): a
  member may annotate their own pods and jobs at any time (role `edit`), so an opt-out is the platform's
  decision, not theirs. Where it is not honoured, the warning and the deactivation say so. Kueue does not copy a
  job's annotations to its Workload (v0.19.2 `jobframework.NewWorkload` keeps only `provreq.kueue.x-k8s.io/`
  ones, plus `metrics.customLabels` sources), so the owner chain is read too;
- every pod of the workload that holds a GPU has been below 5% on all its GPUs for the team's `after`, and the
  workload has been admitted for at least `minAge`;
- the first run warns (an annotation on the Workload and a Kubernetes Event); only a run `grace` later, still
  idle, deactivates. A workload busy again loses its warning. The platform team reactivates a deactivated
  workload (team groups may only read Workloads: Kueue v0.19.2 charts/kueue/templates/rbac/
  workload_viewer_role.yaml); a member may delete and resubmit the job instead;
- only integrations whose job Kueue suspends and resumes on reactivation. For pod-based ones (plain pods,
  pod groups, and Deployment, StatefulSet and LeaderWorkerSet, which Kueue manages as pods or pod groups)
  Kueue's Stop deletes the pods as "end of life" (v0.19.2 pkg/controller/jobs/pod/pod_controller.go), so
  reactivating brings nothing back: those are never reclaimed.

Pods are matched to a Workload through Kueue's real ownership: the Workload's owners (its ownerReferences and
its `kueue.x-k8s.io/job-uid` label, pkg/controller/constants) against the controller chain of each pod (pod ->
Job -> JobSet, pod -> RayCluster -> RayJob, ...), and the `kueue.x-k8s.io/workload` annotation Kueue puts on
the pod templates it starts (apis/kueue/v1beta2/topology_types.go, with TopologyAwareScheduling, on by
default since 0.14). The idle signal is dcgm-exporter's `DCGM_FI_DEV_GPU_UTIL{namespace, pod}`, the series
the `GpuAllocatedIdle` alert reads, over the team's own window.

That signal is only as true as the exporter's pod mapping (`infra.monitoring.exporter`), so before it warns or
deactivates anything reclaim checks that the numbers of every GPU pod of the workload can be trusted
(`infra.monitoring.evidence`) and otherwise refuses the workload, with the reason: a refusal changes nothing
(no warning, no deactivation, an earlier warning kept).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from infra.monitoring import metrics as m
from infra.monitoring.evidence import Evidence, holds_gpu, trust_problems
from infra.monitoring.metrics import seconds
from infra.spec import ClusterSpec

ANNOTATION = "gpufleet.io/reclaimed"  # on a deactivated Workload: why
WARNED = "gpufleet.io/reclaim-warned"  # on a warned Workload: when (RFC 3339)
OPT_OUT = "gpufleet.io/reclaim"  # "never" on the Workload, its job or an owner of its pods
OPT_OUT_VALUE = "never"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on Workloads (pkg/controller/constants, Kueue v0.19.2)
POD_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # on pods Kueue started (v1beta2 WorkloadAnnotation)
WORKLOAD_API = "kueue.x-k8s.io/v1beta2"
EVENT_SOURCE = "gpufleet-reclaim"
MIN_AGE_FACTOR = 2  # default minAge: twice the team's `after`

# Integrations (the group and kind of the Workload's owner) whose job Kueue suspends on deactivation and
# resumes when `spec.active` is set back to true; Kueue v0.19.2 `Suspend()`/`RunWithPodSetsInfo` of
# pkg/controller/jobs/{job,jobset,kubeflow,mpijob,trainjob,rayjob,raycluster}. Everything else is skipped.
RESUMING: dict[tuple[str, str], str] = {
    ("batch", "Job"): "spec.suspend",
    ("jobset.x-k8s.io", "JobSet"): "spec.suspend",
    ("kubeflow.org", "PyTorchJob"): "spec.runPolicy.suspend",
    ("kubeflow.org", "MPIJob"): "spec.runPolicy.suspend",
    ("trainer.kubeflow.org", "TrainJob"): "spec.suspend",
    ("ray.io", "RayJob"): "spec.suspend",
    ("ray.io", "RayCluster"): "spec.suspend",
}

PodKey = tuple[str, str]  # (namespace, pod)
Object = dict[str, Any]
Action = Literal["warn", "deactivate", "clear", "skip", "refuse"]


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class TeamPolicy:
    """A team that opted in, with its thresholds resolved."""

    team: str
    namespace: str
    after: str
    grace: str
    min_age: str
    allow_opt_out: bool = False  # the platform lets the team's members opt workloads out


def team_policies(spec: ClusterSpec) -> list[TeamPolicy]:
    """The teams with `reclaimIdle`; `after` defaults to the team's idleAfter, `minAge` to twice `after`."""
    out: list[TeamPolicy] = []
    for team in spec.teams:
        if (opt := team.reclaim_idle) is None:
            continue
        after = opt.after or team.idle_after or spec.cluster.monitoring.idle_after
        min_age = opt.min_age or f"{seconds(after) * MIN_AGE_FACTOR}s"
        namespace = team.namespace or team.name
        out.append(TeamPolicy(team.name, namespace, after, opt.grace, min_age, opt.allow_opt_out))
    return out


def windows(policies: Iterable[TeamPolicy]) -> dict[str, str]:
    """Each opted-in team's namespace and its idle window, what `evidence.gather` reads."""
    return {p.namespace: p.after for p in policies}


# --- ownership ----------------------------------------------------------------------------------------------


def _meta(obj: Object) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def controller_ref(obj: Object) -> dict[str, Any] | None:
    return next((r for r in _meta(obj).get("ownerReferences") or [] if r.get("controller")), None)


def ancestry(obj: Object, owners: Mapping[str, Object]) -> list[str]:
    """The UIDs of `obj` and of its controllers up the chain, as far as `owners` (by UID) knows them."""
    uids = [str(_meta(obj).get("uid", ""))]
    ref = controller_ref(obj)
    while ref is not None and ref["uid"] not in uids:
        uids.append(ref["uid"])
        parent = owners.get(ref["uid"])
        ref = controller_ref(parent) if parent is not None else None
    return [u for u in uids if u]


def workload_owner_uids(workload: Object) -> set[str]:
    meta = _meta(workload)
    uids = {r["uid"] for r in meta.get("ownerReferences") or []}
    if uid := (meta.get("labels") or {}).get(JOB_UID_LABEL):
        uids.add(uid)
    return uids


def workload_pods(workload: Object, pods: Iterable[Object], owners: Mapping[str, Object]) -> list[Object]:
    """The pods of a Workload: one of its owners is in the pod's controller chain (the pod itself for the pod
    integration), or Kueue annotated the pod with the Workload's name."""
    name, uids = _meta(workload)["name"], workload_owner_uids(workload)
    return [
        p
        for p in pods
        if (_meta(p).get("annotations") or {}).get(POD_WORKLOAD_ANNOTATION) == name
        or uids.intersection(ancestry(p, owners))
    ]


def _group_kind(ref: Mapping[str, Any]) -> tuple[str, str]:
    api = str(ref.get("apiVersion", ""))
    return (api.split("/")[0] if "/" in api else "", str(ref.get("kind", "")))


def integration(workload: Object) -> tuple[str, str] | None:
    """The group and kind of the job a Workload stands for: its controller owner (a pod group's Workload is
    owned by all its pods, none of them the controller)."""
    refs = _meta(workload).get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return _group_kind(ref) if ref else None


def resolve_owners(
    pods: Iterable[Object],
    workloads: Iterable[Object],
    get: Callable[[str, str, str, str], Object | None],
) -> dict[str, Object]:
    """Every owner up the pods' controller chains and every owner of the Workloads, by UID, read with
    `get(namespace, apiVersion, kind, name)` (None when it cannot be read); each object is read once."""
    owners: dict[str, Object] = {}

    def visit(ns: str, ref: Mapping[str, Any] | None, chain: bool) -> None:
        while ref is not None and ref["uid"] not in owners:
            obj = get(ns, ref["apiVersion"], ref["kind"], ref["name"])
            if obj is None or _meta(obj).get("uid") != ref["uid"]:
                return
            owners[ref["uid"]] = obj
            ref = controller_ref(obj) if chain else None

    for pod in pods:
        visit(_meta(pod).get("namespace", ""), controller_ref(pod), True)
    for wl in workloads:
        for ref in _meta(wl).get("ownerReferences") or []:
            if ref.get("kind") != "Pod":
                visit(_meta(wl).get("namespace", ""), ref, False)
    return owners


def opted_out(workload: Object, pods: Iterable[Object], owners: Mapping[str, Object]) -> bool:
    """`gpufleet.io/reclaim: never` on the Workload, one of its owners, one of its pods or their owners."""
    uids = set(workload_owner_uids(workload)) | {u for p in pods for u in ancestry(p, owners)}
    objects = [workload, *pods, *(owners[u] for u in uids if u in owners)]
    return any((_meta(o).get("annotations") or {}).get(OPT_OUT) == OPT_OUT_VALUE for o in objects)


# --- the decision -------------------------------------------------------------------------------------------


def admitted_at(workload: Object) -> float | None:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Admitted" and cond.get("status") == "True":
            return parse_time(cond["lastTransitionTime"])
    return None


def warned_at(workload: Object) -> float | None:
    value = (_meta(workload).get("annotations") or {}).get(WARNED)
    try:
        return parse_time(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Decision:
    action: Action
    team: str
    namespace: str
    workload: str
    uid: str
    pods: tuple[str, ...]
    reason: str
    api_version: str = WORKLOAD_API

    def patch(self, at: float) -> dict[str, Any] | None:
        """A JSON merge patch for the Workload (null removes an annotation), or None for a skip."""
        if self.action == "warn":
            return {"metadata": {"annotations": {WARNED: rfc3339(at)}}}
        if self.action == "clear":
            return {"metadata": {"annotations": {WARNED: None}}}
        if self.action == "deactivate":
            return {
                "metadata": {"annotations": {ANNOTATION: self.reason, WARNED: None}},
                "spec": {"active": False},
            }
        return None

    def event(self, at: float) -> dict[str, Any] | None:
        """A core/v1 Event on the Workload, so `kubectl describe` and `kubectl get events` show the warning
        and the deactivation to the team."""
        reasons = {"warn": "GpuIdleReclaimWarning", "deactivate": "GpuIdleReclaimed"}
        if self.action not in reasons:
            return None
        ts = rfc3339(at)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.workload}.", "namespace": self.namespace},
            "involvedObject": {
                "apiVersion": self.api_version,
                "kind": "Workload",
                "name": self.workload,
                "namespace": self.namespace,
                "uid": self.uid,
            },
            "reason": reasons[self.action],
            "message": self.reason[:1024],
            "type": "Warning",
            "source": {"component": EVENT_SOURCE},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "team": self.team,
            "namespace": self.namespace,
            "workload": self.workload,
            "pods": list(self.pods),
            "reason": self.reason,
        }

    def line(self, apply: bool) -> str:
        verb = {
            "warn": ("warn", "would warn"),
            "deactivate": ("deactivate", "would deactivate"),
            "clear": ("clear the warning of", "would clear the warning of"),
            "skip": ("skip", "skip"),
            "refuse": ("refuse", "refuse"),
        }[self.action][0 if apply else 1]
        return f"{verb} {self.namespace}/{self.workload} (team {self.team}): {self.reason}"


def _ago(s: float) -> str:
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def decide(
    policy: TeamPolicy,
    workload: Object,
    pods: list[Object],
    evidence: Evidence,
    owners: Mapping[str, Object],
    at: float,
) -> Decision | None:
    """What one run does to one Workload; None when there is nothing to say (busy, inactive, not admitted)."""
    meta, ns = _meta(workload), policy.namespace
    if (workload.get("spec") or {}).get("active") is False or (admitted := admitted_at(workload)) is None:
        return None
    holders = [p for p in pods if holds_gpu(p) or (ns, _meta(p)["name"]) in evidence.last_seen]
    gpu = sorted(_meta(p)["name"] for p in holders)
    seen = [p for p in gpu if (ns, p) in evidence.last_seen]
    warned = warned_at(workload)

    def say(action: Action, reason: str) -> Decision:
        api = str(workload.get("apiVersion") or WORKLOAD_API)
        return Decision(
            action, policy.team, ns, meta["name"], str(meta.get("uid", "")), tuple(gpu), reason, api
        )

    if not gpu or any((ns, p) not in evidence.idle for p in seen):
        return say("clear", "its GPUs are busy again") if warned is not None else None
    idle_text = (
        f"pods {', '.join(seen)} held their GPUs below {m.IDLE_UTIL_PERCENT}% utilisation for more than "
        f"{policy.after}"
    )
    if problems := trust_problems(ns, holders, evidence, at):
        said = f" (by them, {idle_text})" if seen else ""
        return say("refuse", f"its GPU numbers cannot be trusted: {'; '.join(problems)}{said}")
    not_honoured = ""
    if opted_out(workload, pods, owners):
        if policy.allow_opt_out:
            return say("skip", f"{idle_text}, but it opts out ({OPT_OUT}: {OPT_OUT_VALUE})")
        not_honoured = (
            f" Its {OPT_OUT}: {OPT_OUT_VALUE} is not honoured: the platform does not let team {policy.team} opt "
            "out (teams[].reclaimIdle.allowOptOut)."
        )
    kind = integration(workload)
    if kind not in RESUMING:
        what = "/".join(k for k in kind if k) if kind else "unknown"
        return say(
            "skip",
            f"{idle_text}, but its integration ({what}) does not resume after deactivation "
            "(Kueue deletes pod-based workloads' pods as end of life)",
        )
    if at - admitted < seconds(policy.min_age):
        return say(
            "skip",
            f"{idle_text}, but it was admitted only {_ago(at - admitted)} ago (minAge {policy.min_age})",
        )
    return _warn_or_deactivate(policy, say, idle_text, kind, warned, at, not_honoured)


def _warn_or_deactivate(
    policy: TeamPolicy,
    say: Callable[[Action, str], Decision],
    idle_text: str,
    kind: tuple[str, str],
    warned: float | None,
    at: float,
    note: str,
) -> Decision:
    """An idle, reclaimable workload: warned first, deactivated only a `grace` after the warning."""
    if warned is None:
        deadline = rfc3339(at + seconds(policy.grace))
        keep = (
            f"Keep it: annotate its job {OPT_OUT}={OPT_OUT_VALUE}."
            if policy.allow_opt_out
            else "To keep it, ask the platform team."
        )
        return say(
            "warn",
            f"GPUs idle: {idle_text} (team {policy.team}). gpufleet reclaim deactivates this workload at the "
            f"first run after {deadline} if they are still idle. {keep}{note}",
        )
    if at - warned < seconds(policy.grace):
        return say("skip", f"{idle_text}; warned {_ago(at - warned)} ago, grace {policy.grace}{note}")
    return say(
        "deactivate",
        f"GPUs idle: {idle_text} (team {policy.team}), still idle {_ago(at - warned)} after the warning; "
        f"deactivated by gpufleet reclaim.{note} The platform team reactivates it with spec.active: true "
        f"(Kueue resumes the {kind[1]} through {RESUMING[kind]}); a team member may delete and resubmit the job.",
    )


def plan_reclaim(
    policies: Iterable[TeamPolicy],
    evidence: Evidence,
    pods: Mapping[str, list[Object]],
    workloads: Mapping[str, list[Object]],
    owners: Mapping[str, Object],
    at: float,
) -> list[Decision]:
    """Decisions per opted-in team; `pods` and `workloads` are the items of `kubectl get -o json` per namespace,
    `owners` what `resolve_owners` read."""
    out: list[Decision] = []
    for policy in policies:
        ns_pods = pods.get(policy.namespace, [])
        for wl in workloads.get(policy.namespace, []):
            found = decide(policy, wl, workload_pods(wl, ns_pods, owners), evidence, owners, at)
            if found is not None:
                out.append(found)
    return out
