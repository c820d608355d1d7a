"""Reclaim: which pods are idle, from a real Prometheus filled with known series; which
Workload owns them, through the owner chains Kueue and the job controllers build; the warn-then-act decision;
and `invoke reclaim` end to end with `kubectl` answered by invoke's MockContext.

The series (1-minute samples, the 6 h before T), all in team-alpha unless said:
- `idle-2gpu`: two GPUs at 0% all along: idle;
- `half-busy`: two GPUs, one at 0%, one at 80%: not idle (a pod is idle only when all its GPUs are);
- `young`: one GPU at 0% for the last hour only: not idle for a 2h window (too few samples to tell);
- `dipped`: 0% except one sample at 50% 90 minutes before T: not idle for 2h, idle for 1h;
- `js-0` (a JobSet's pod), `nb-pod` (a plain pod), `opt-0` (an opted-out job's pod): 0% all along;
- team-beta `b-0`: 0% all along, but beta does not opt in.
What Kueue v0.19.2 does on deactivation per integration is tested on the twin (tests/twin/test_reclaim.py).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from invoke import Exit, MockContext, Result

import tasks
from infra.errors import ConfigError
from infra.monitoring import metrics as m
from infra.monitoring.evidence import Evidence, gather
from infra.monitoring.prometheus import Prometheus
from infra.monitoring.reclaim import (
    ANNOTATION,
    OPT_OUT,
    POD_WORKLOAD_ANNOTATION,
    WARNED,
    TeamPolicy,
    decide,
    integration,
    resolve_owners,
    rfc3339,
    team_policies,
    windows,
    workload_pods,
)
from infra.stackfile import parse_config
from tests.monitoring.conftest import run_promtool

T = 1767225600  # 2026-01-01T00:00:00Z
START = T - 6 * 3600
STEP = 60
H = 3600

# --- the Prometheus ------------------------------------------------------------------------------------------


def _series(ns: str, pod: str, gpu: int, value: Any, since: int = START) -> list[str]:
    labels = f'{{gpu="{gpu}",UUID="GPU-{pod}-{gpu}",Hostname="h1",namespace="{ns}",pod="{pod}"}}'
    return [
        f"{m.GPU_UTIL}{labels} {value(t) if callable(value) else value} {t}"
        for t in range(since, T + 1, STEP)
    ]


def openmetrics() -> str:
    a = "team-alpha"
    lines = [f"# TYPE {m.UP} gauge"]
    lines += [f'{m.UP}{{job="{m.DCGM_JOB}",node="h1"}} 1 {t}' for t in range(START, T + 1, STEP)]
    lines += [f"# TYPE {m.GPU_UTIL} gauge"]
    lines += _series(a, "idle-2gpu", 0, 0) + _series(a, "idle-2gpu", 1, 0)
    lines += _series(a, "half-busy", 0, 0) + _series(a, "half-busy", 1, 80)
    lines += _series(a, "young", 0, 0, since=T - H)
    lines += _series(a, "dipped", 0, lambda t: 50 if t == T - 90 * 60 else 0)
    for pod in ("js-0", "nb-pod", "opt-0"):
        lines += _series(a, pod, 0, 0)
    lines += _series("team-beta", "b-0", 0, 0)
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus_url(
    promtool: str, prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh Prometheus on a free loopback port, its TSDB made by promtool from `openmetrics()`."""
    root = tmp_path_factory.mktemp("prometheus-reclaim")
    (root / "series.om").write_text(openmetrics())
    made = run_promtool(
        promtool, "tsdb", "create-blocks-from", "openmetrics", str(root / "series.om"), str(root / "d")
    )
    assert made.returncode == 0, made.stdout + made.stderr
    (root / "prometheus.yml").write_text("global: {}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log = (root / "prometheus.log").open("w")
    server = subprocess.Popen(
        [prometheus_bin, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'd'}",
         "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, (root / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _policy(after: str, ns: str = "team-alpha") -> TeamPolicy:
    return TeamPolicy("alpha", ns, after, "1h", "4h")


def test_a_pod_is_idle_only_when_all_its_gpus_were_idle_for_the_whole_window(prometheus_url: str) -> None:
    """The same series and threshold as the GpuAllocatedIdle alert (`DCGM_FI_DEV_GPU_UTIL{namespace, pod}`
    below 5%), over the team's own window."""
    found = gather(Prometheus(prometheus_url), windows([_policy("2h")]), T, "1m")
    assert found.idle == {("team-alpha", p) for p in ("idle-2gpu", "js-0", "nb-pod", "opt-0")}
    assert ("team-alpha", "half-busy") in found.holding and ("team-alpha", "young") in found.holding
    assert ("team-beta", "b-0") not in found.holding  # only the opted-in teams' namespaces are read
    assert set(found.last_seen.values()) == {T} and found.fresh_s == 180  # sampled at T; 3 scrape intervals
    assert found.exporter_up == {"h1": 1.0} and found.degenerate == {}
    short = gather(Prometheus(prometheus_url), windows([_policy("1h")]), T, "1m").idle
    assert {("team-alpha", "dipped"), ("team-alpha", "young")} <= short  # idle and present for the last hour


# --- ownership -----------------------------------------------------------------------------------------------


def _ref(kind: str, name: str, uid: str, api: str = "batch/v1", controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": controller}


def _obj(
    kind: str, name: str, uid: str, *refs: dict[str, Any], api: str = "v1", **meta: Any
) -> dict[str, Any]:
    md = {"name": name, "namespace": "team-alpha", "uid": uid, "ownerReferences": list(refs), **meta}
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": md,
        "spec": {"nodeName": "h1"} if kind == "Pod" else {},
    }


def _workload(
    name: str, *refs: dict[str, Any], admitted: float | None = T - 5 * H, **meta: Any
) -> dict[str, Any]:
    wl = _obj("Workload", name, f"wl-{name}", *refs, api="kueue.x-k8s.io/v1beta2", **meta)
    if admitted is not None:
        cond = {"type": "Admitted", "status": "True", "lastTransitionTime": rfc3339(admitted)}
        wl["status"] = {"conditions": [cond]}
    return wl


JOBSET = _ref("JobSet", "train", "uid-js", "jobset.x-k8s.io/v1alpha2")
CHILD_JOB = _obj("Job", "train-workers-0", "uid-js-job", JOBSET, api="batch/v1")
RAYJOB = _ref("RayJob", "rl", "uid-rayjob", "ray.io/v1")
RAYCLUSTER = _obj("RayCluster", "rl-raycluster", "uid-rc", RAYJOB, api="ray.io/v1")
OWNERS = {"uid-js-job": CHILD_JOB, "uid-rc": RAYCLUSTER}


@pytest.mark.parametrize(
    ("workload", "pod"),
    [
        # batch Job, Kubeflow jobs, RayCluster: the Workload's owner is the pods' controller
        (_workload("job-a", _ref("Job", "a", "uid-a")), _obj("Pod", "a-0", "p1", _ref("Job", "a", "uid-a"))),
        # JobSet (jobset v0.8 creates a Job per replicated job, and the Job the pods)
        (
            _workload("jobset-train", JOBSET),
            _obj("Pod", "js-0", "p2", _ref("Job", "train-workers-0", "uid-js-job")),
        ),
        # RayJob -> RayCluster -> pods (KubeRay)
        (
            _workload("rayjob-rl", RAYJOB),
            _obj("Pod", "rl-head", "p3", _ref("RayCluster", "rl-raycluster", "uid-rc", "ray.io/v1")),
        ),
        # the pod integration: the Workload is owned by the pod itself (Deployment pods too, via their ReplicaSet)
        (
            _workload("pod-nb", _ref("Pod", "nb", "p4", "v1")),
            _obj("Pod", "nb", "p4", _ref("ReplicaSet", "nb-7f", "rs", "apps/v1")),
        ),
        # Kueue's own link on the pods it starts (TopologyAwareScheduling, on by default)
        (_workload("job-b"), _obj("Pod", "b-0", "p5", annotations={POD_WORKLOAD_ANNOTATION: "job-b"})),
    ],
    ids=["job", "jobset", "rayjob", "pod", "workload-annotation"],
)
def test_pods_are_matched_through_the_owner_chain(workload: dict[str, Any], pod: dict[str, Any]) -> None:
    """Kueue v0.19.2: the Workload's ownerReferences and `kueue.x-k8s.io/job-uid` label name the job
    (pkg/controller/constants); the pods' controllers lead up to it. Controller UID alone missed JobSet and RayJob."""
    stranger = _obj("Pod", "other", "p9", _ref("Job", "other", "uid-other"))
    assert workload_pods(workload, [pod, stranger], OWNERS) == [pod]


def test_the_job_uid_label_names_the_owner_too() -> None:
    wl = _workload("job-c", labels={"kueue.x-k8s.io/job-uid": "uid-c"})
    pod = _obj("Pod", "c-0", "p6", _ref("Job", "c", "uid-c"))
    assert workload_pods(wl, [pod], {}) == [pod]


def test_owners_are_read_once_up_the_chain_and_a_recreated_owner_is_not_trusted() -> None:
    reads: list[tuple[str, str, str, str]] = []
    objects = {("Job", "train-workers-0"): CHILD_JOB, ("JobSet", "train"): _obj("JobSet", "train", "uid-js", api="jobset.x-k8s.io/v1alpha2"),
               ("Job", "a"): _obj("Job", "a", "uid-new", api="batch/v1")}  # fmt: skip

    def get(ns: str, api: str, kind: str, name: str) -> dict[str, Any] | None:
        reads.append((ns, api, kind, name))
        return objects.get((kind, name))

    pods = [_obj("Pod", f"js-{i}", f"p{i}", _ref("Job", "train-workers-0", "uid-js-job")) for i in range(3)]
    pods.append(_obj("Pod", "a-0", "pa", _ref("Job", "a", "uid-a")))
    owners = resolve_owners(pods, [_workload("jobset-train", JOBSET)], get)
    assert set(owners) == {"uid-js-job", "uid-js"}  # the Job `a` read back has another UID: not its owner
    assert reads.count(("team-alpha", "batch/v1", "Job", "train-workers-0")) == 1
    assert ("team-alpha", "jobset.x-k8s.io/v1alpha2", "JobSet", "train") in reads


# --- the decision --------------------------------------------------------------------------------------------

POLICY = TeamPolicy("alpha", "team-alpha", "2h", "1h", "4h")
JOB = _ref("Job", "train", "uid-train")
PODS = [_obj("Pod", f"train-{i}", f"pt{i}", JOB) for i in range(2)]
GPU_PODS = {("team-alpha", "train-0"), ("team-alpha", "train-1")}


def _evidence(idle: set[tuple[str, str]] = GPU_PODS, **changes: Any) -> Evidence:
    """Every GPU pod seen at T, node h1's exporter up, no degenerate GPU, unless `changes` says otherwise."""
    found = Evidence(idle, {k: float(T) for k in GPU_PODS}, {"h1": 1.0}, {}, 90.0)
    return replace(found, **changes)


def _decide(
    wl: dict[str, Any],
    idle: set[tuple[str, str]] = GPU_PODS,
    owners: dict[str, Any] | None = None,
    at: float = T,
    pods: list[dict[str, Any]] = PODS,
    evidence: Evidence | None = None,
) -> Any:
    found = evidence or _evidence(idle)
    return decide(POLICY, wl, workload_pods(wl, pods, owners or {}), found, owners or {}, at)


def test_the_first_run_warns_and_only_a_run_after_the_grace_deactivates() -> None:
    first = _decide(_workload("job-train", JOB))
    assert first.action == "warn" and first.pods == ("train-0", "train-1")
    assert first.patch(T) == {"metadata": {"annotations": {WARNED: "2026-01-01T00:00:00Z"}}}
    event = first.event(T)
    assert event["involvedObject"] == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                       "name": "job-train", "namespace": "team-alpha", "uid": "wl-job-train"}  # fmt: skip
    assert (
        event["type"] == "Warning" and "2026-01-01T01:00:00Z" in event["message"]
    )  # the deadline: T + grace
    warned = _workload("job-train", JOB, annotations={WARNED: rfc3339(T - 30 * 60)})
    assert _decide(warned).action == "skip"
    late = _workload("job-train", JOB, annotations={WARNED: rfc3339(T - H)})
    act = _decide(late)
    assert act.action == "deactivate" and act.event(T)["reason"] == "GpuIdleReclaimed"
    patch = act.patch(T)
    assert patch["spec"] == {"active": False} and patch["metadata"]["annotations"][WARNED] is None
    reason = patch["metadata"]["annotations"][ANNOTATION]
    assert "The platform team reactivates it with spec.active: true" in reason
    assert "delete and resubmit" in reason  # team groups may not patch Workloads


def test_never_while_one_gpu_pod_is_busy_and_a_busy_again_workload_loses_its_warning() -> None:
    assert _decide(_workload("job-train", JOB), idle={("team-alpha", "train-0")}) is None
    warned = _workload("job-train", JOB, annotations={WARNED: rfc3339(T - 3 * H)})
    clear = _decide(warned, idle={("team-alpha", "train-0")})
    assert clear.action == "clear" and clear.patch(T) == {"metadata": {"annotations": {WARNED: None}}}


def test_too_young_inactive_or_not_admitted_workloads_are_left_alone() -> None:
    young = _decide(_workload("job-train", JOB, admitted=T - 3 * H))
    assert young.action == "skip" and "minAge 4h" in young.reason
    inactive = _workload("job-train", JOB)
    inactive["spec"]["active"] = False
    assert _decide(inactive) is None
    assert _decide(_workload("job-train", JOB, admitted=None)) is None


def test_the_opt_out_annotation_counts_on_the_workload_its_job_or_the_pods_owners() -> None:
    """Kueue v0.19.2 `jobframework.NewWorkload` does not copy a job's annotations to its Workload (only
    provreq.kueue.x-k8s.io/ ones): the opt-out is looked up along the owner chain (for a team the platform
    lets opt out)."""
    never = {OPT_OUT: "never"}
    allowed = replace(POLICY, allow_opt_out=True)
    wl = _workload("job-train", JOB, annotations=never)
    assert decide(allowed, wl, workload_pods(wl, PODS, {}), _evidence(), {}, T).action == "skip"
    job = _obj("Job", "train", "uid-train", api="batch/v1", annotations=never)
    wl = _workload("job-train", JOB)
    skipped = decide(allowed, wl, workload_pods(wl, PODS, {}), _evidence(), {"uid-train": job}, T)
    assert skipped.action == "skip" and OPT_OUT in skipped.reason
    other = _obj("Job", "train", "uid-train", api="batch/v1", annotations={OPT_OUT: "later"})
    assert _decide(_workload("job-train", JOB), owners={"uid-train": other}).action == "warn"


def test_an_opt_out_is_the_platforms_decision() -> None:
    """A member may annotate their own jobs at any time (role `edit`), also after the warning: without
    `reclaimIdle.allowOptOut` the annotation is not honoured, and the warning and the deactivation say so."""
    never = {OPT_OUT: "never"}
    first = _decide(_workload("job-train", JOB, annotations=never))
    assert (
        first.action == "warn"
        and "is not honoured" in first.reason
        and "ask the platform team" in first.reason
    )
    late = _decide(_workload("job-train", JOB, annotations={**never, WARNED: rfc3339(T - H)}))
    assert late.action == "deactivate" and "allowOptOut" in late.reason


def test_pod_based_integrations_are_never_reclaimed() -> None:
    """Kueue v0.19.2 pkg/controller/jobs/pod/pod_controller.go `Stop` deletes the pods as end of life (the twin
    shows the Workload goes too): plain pods, pod groups, Deployments and StatefulSets cannot be resumed."""
    pod = _obj("Pod", "train-0", "pt0", JOB)
    wl = _workload("pod-train-0", _ref("Pod", "train-0", "pt0", "v1", controller=False))
    assert integration(wl) == ("", "Pod")
    got = decide(POLICY, wl, [pod], _evidence(), {}, T)
    assert got.action == "skip" and "does not resume" in got.reason and got.patch(T) is None


# --- numbers reclaim will not act on -------------------------------------------------------------------------


def _gpu_pod(name: str, uid: str, resource: str = "nvidia.com/gpu", node: str = "h1") -> dict[str, Any]:
    """A running pod the kubelet gave a GPU (what the API server says, whatever Prometheus has)."""
    pod = _obj("Pod", name, uid, JOB)
    pod["spec"] = {
        "nodeName": node,
        "containers": [{"name": "main", "resources": {"limits": {resource: "1"}}}],
    }
    pod["status"] = {"phase": "Running"}
    return pod


WARNED_LONG_AGO = {WARNED: rfc3339(T - 3 * H)}


def test_a_gpu_pod_without_a_series_makes_reclaim_refuse_not_act() -> None:
    """One pod per GPU (dcgm-exporter without KUBERNETES_VIRTUAL_GPUS, aws): a time-sliced GPU's other pods have
    no series. Judged on its idle sibling alone the workload would be deactivated; reclaim refuses it, says which
    pod it cannot see, keeps the warning and changes nothing."""
    pods = [_gpu_pod("train-0", "pt0"), _gpu_pod("train-1", "pt1", "nvidia.com/gpu.shared")]
    seen_one = _evidence(last_seen={("team-alpha", "train-0"): float(T)}, idle={("team-alpha", "train-0")})
    got = _decide(_workload("job-train", JOB, annotations=WARNED_LONG_AGO), pods=pods, evidence=seen_one)
    assert got.action == "refuse" and got.patch(T) is None and got.event(T) is None
    assert "pod train-1 holds a GPU but has no DCGM_FI_DEV_GPU_UTIL series" in got.reason
    assert got.pods == ("train-0", "train-1")
    # a pod seen busy settles it: nothing to refuse, nothing to do
    busy = _evidence(last_seen={("team-alpha", "train-0"): float(T)}, idle=set())
    assert _decide(_workload("job-train", JOB), pods=pods, evidence=busy) is None


def test_stale_series_or_a_down_exporter_make_reclaim_refuse() -> None:
    wl = _workload("job-train", JOB, annotations=WARNED_LONG_AGO)
    stale = _decide(wl, evidence=_evidence(last_seen={k: float(T - 240) for k in GPU_PODS}))
    assert stale.action == "refuse" and "last GPU sample is 240s old (more than 90s)" in stale.reason
    down = _decide(wl, evidence=_evidence(exporter_up={"h1": 0.0}))
    assert down.action == "refuse" and "the dcgm-exporter target of node h1 is down" in down.reason
    unscraped = _decide(wl, evidence=_evidence(exporter_up={}))
    assert unscraped.action == "refuse" and "node h1 is not scraped" in unscraped.reason
    assert _decide(wl).action == "deactivate"  # the same workload, numbers trusted


def test_a_busy_gpu_whose_pods_all_read_zero_makes_reclaim_refuse() -> None:
    """dcgm-exporter's per-process mode without the pods' UIDs or the host's PIDs gives every pod "0" beside
    the GPU's real device series (4.5.3-4.8.2 kubernetes.go:271-279): such a GPU is degenerate."""
    wl = _workload("job-train", JOB, annotations=WARNED_LONG_AGO)
    broken = _evidence(degenerate={("team-alpha", "train-1"): {"GPU-b": 93.0}})
    got = _decide(wl, evidence=broken)
    assert got.action == "refuse" and got.patch(T) is None
    assert "GPU GPU-b of pod train-1 was 93% busy while every pod holding it read exactly 0" in got.reason
    assert "(by them, pods train-0, train-1 held their GPUs below 5%" in got.reason


# --- the spec ------------------------------------------------------------------------------------------------


def _config(team: dict[str, Any], prometheus: str = "install") -> dict[str, Any]:
    return {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {"name": "r", "monitoring": {"prometheus": prometheus, "idleAfter": "3h"}},
        "gpufleet:nodePools": [{"name": "h100", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 2}],
        "gpufleet:teams": [{"name": "alpha", "quotas": {"h100": 8}, **team}, {"name": "beta"}],
    }


def test_team_reclaim_defaults() -> None:
    assert team_policies(parse_config(_config({"reclaimIdle": True}), "dev")) == [
        TeamPolicy("alpha", "alpha", "3h", "1h", "21600s")
    ]
    allowing = parse_config(_config({"reclaimIdle": {"allowOptOut": True}}), "dev")
    assert team_policies(allowing) == [TeamPolicy("alpha", "alpha", "3h", "1h", "21600s", allow_opt_out=True)]
    spec = parse_config(_config({"idleAfter": "30m", "reclaimIdle": {"after": "4h", "grace": "2h"}}), "dev")
    assert team_policies(spec) == [TeamPolicy("alpha", "alpha", "4h", "2h", "28800s")]
    assert team_policies(parse_config(_config({"reclaimIdle": False}), "dev")) == []


@pytest.mark.parametrize(
    ("team", "path"),
    [
        ({"reclaimIdle": {"after": "4 hours"}}, "gpufleet:teams[0].reclaimIdle.after"),
        ({"reclaimIdle": {"graze": "1h"}}, "gpufleet:teams[0].reclaimIdle.graze"),
    ],
)
def test_bad_reclaim_keys_are_named(team: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(path)):
        parse_config(_config(team), "dev")


def test_a_team_reclaim_needs_a_prometheus() -> None:
    with pytest.raises(ConfigError, match=re.escape("gpufleet:teams[0].reclaimIdle: needs")):
        parse_config(_config({"reclaimIdle": True}, prometheus="none"), "dev")


# --- invoke reclaim ------------------------------------------------------------------------------------------

NOW = T - 5 * H


def _cluster() -> tuple[
    dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]], dict[tuple[str, str], dict[str, Any]]
]:
    jobset = _obj("JobSet", "train", "uid-js", api="jobset.x-k8s.io/v1alpha2")
    optjob = _obj("Job", "opt", "uid-opt", api="batch/v1", annotations={OPT_OUT: "never"})
    pods = [
        _obj("Pod", "idle-2gpu", "p1", _ref("Job", "idle", "uid-idle")),
        _obj("Pod", "half-busy", "p2", _ref("Job", "half", "uid-half")),
        _obj("Pod", "js-0", "p3", _ref("Job", "train-workers-0", "uid-js-job")),
        _obj("Pod", "nb-pod", "p4"),
        _obj("Pod", "opt-0", "p5", _ref("Job", "opt", "uid-opt")),
    ]
    workloads = [
        _workload("job-idle", _ref("Job", "idle", "uid-idle"), admitted=NOW),
        _workload("job-half", _ref("Job", "half", "uid-half"), admitted=NOW),
        _workload("jobset-train", JOBSET, admitted=NOW, annotations={WARNED: rfc3339(T - 2 * H)}),
        _workload("pod-nb-pod", _ref("Pod", "nb-pod", "p4", "v1"), admitted=NOW),
        _workload("job-opt", _ref("Job", "opt", "uid-opt"), admitted=NOW),
    ]
    owners = {("Job.v1.batch", "train-workers-0"): CHILD_JOB, ("JobSet.v1alpha2.jobset.x-k8s.io", "train"): jobset,
              ("Job.v1.batch", "opt"): optjob}  # fmt: skip
    return {"team-alpha": pods}, {"team-alpha": workloads}, owners


def _ctx() -> MockContext:
    pods, workloads, owners = _cluster()
    results: dict[Any, Result] = {
        re.compile(r"kubectl get pods -n team-alpha -o json"): Result(
            stdout=json.dumps({"items": pods["team-alpha"]})
        ),
        re.compile(r"kubectl get workloads.kueue.x-k8s.io -n team-alpha -o json"): Result(
            stdout=json.dumps({"items": workloads["team-alpha"]})
        ),
        re.compile(r"kubectl version --client"): Result(stdout="Client Version: v1.35.0"),
        re.compile(r"kubectl patch .*"): Result(stdout="{}"),
        re.compile(r"kubectl create -f - -o json"): Result(stdout="{}"),
    }
    for (what, name), obj in owners.items():
        results[re.compile(rf"kubectl get {re.escape(what)} {name} -n team-alpha -o json")] = Result(
            stdout=json.dumps(obj)
        )
    results[re.compile(r"kubectl get \S+ \S+ -n team-alpha -o json")] = Result(exited=1, stderr="NotFound")
    return MockContext(run=results, repeat=True)


def _stack(tmp_path: Path, master: bool, team: Any = "default") -> str:
    opt = {"after": "2h", "grace": "1h", "allowOptOut": True} if team == "default" else team
    doc = {"config": _config({"namespace": "team-alpha", "reclaimIdle": opt})}
    doc["config"]["gpufleet:cluster"]["monitoring"]["reclaimIdle"] = master
    doc["config"]["gpufleet:teams"][1]["namespace"] = "team-beta"
    path = tmp_path / "Pulumi.reclaim-test.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_dry_run_reports_every_decision_and_changes_nothing(
    prometheus_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = _ctx()
    tasks.reclaim(ctx, stack=_stack(tmp_path, False), prometheus=prometheus_url, until=str(T))
    out = capsys.readouterr().out
    assert "would warn team-alpha/job-idle (team alpha): GPUs idle: pods idle-2gpu" in out
    assert "would deactivate team-alpha/jobset-train (team alpha)" in out  # warned 2h ago, grace 1h
    assert re.search(r"skip team-alpha/pod-nb-pod .*does not resume", out)
    assert re.search(r"skip team-alpha/job-opt .*opts out", out)
    assert "job-half" not in out and "team-beta" not in out
    assert "dry run (--apply to act): 1 warn, 1 deactivate, 0 clear, 2 skip" in out
    assert not [c for c in ctx.run.call_args_list if re.match(r"kubectl (patch|create)", c.args[0])]


def test_apply_warns_with_an_event_and_deactivates_what_was_warned(
    prometheus_url: str, tmp_path: Path
) -> None:
    """Workload v1beta2 `spec.active: false` (Kueue v0.19.2 apis/kueue/v1beta2/workload_types.go): Kueue evicts
    the workload and never readmits it until it is set back to true."""
    ctx = _ctx()
    tasks.reclaim(ctx, stack=_stack(tmp_path, True), prometheus=prometheus_url, until=str(T), apply=True)
    calls = [c.args[0] for c in ctx.run.call_args_list]
    patches = {
        c.split()[3]: json.loads(c.split(" -p ", 1)[1].rsplit(" -o ", 1)[0].strip("'"))
        for c in calls
        if c.startswith("kubectl patch")
    }
    assert set(patches) == {"job-idle", "jobset-train"}
    assert WARNED in patches["job-idle"]["metadata"]["annotations"] and "spec" not in patches["job-idle"]
    assert patches["jobset-train"]["spec"] == {"active": False}
    assert "spec.suspend" in patches["jobset-train"]["metadata"]["annotations"][ANNOTATION]
    events = [k for k in ctx.run.call_args_list if k.args[0] == "kubectl create -f - -o json"]
    sent = [json.loads(k.kwargs["in_stream"].getvalue()) for k in events]
    assert sorted(e["reason"] for e in sent) == ["GpuIdleReclaimWarning", "GpuIdleReclaimed"]


def test_apply_needs_the_master_switch(tmp_path: Path) -> None:
    with pytest.raises(Exit) as info:
        tasks.reclaim(MockContext(), stack=_stack(tmp_path, False), apply=True)
    assert info.value.code == 2 and "gpufleet:cluster.monitoring.reclaimIdle" in str(info.value.message)


def test_no_team_opted_in_reads_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks.reclaim(MockContext(), stack=_stack(tmp_path, True, team=False), apply=True)
    assert "no team opts in (gpufleet:teams[].reclaimIdle)" in capsys.readouterr().out


def test_an_unreachable_prometheus_exits_3(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Exit) as info:
        tasks.reclaim(MockContext(), stack=_stack(tmp_path, False), prometheus=f"http://127.0.0.1:{port}")
    assert info.value.code == 3


KLOG_REFUSED = (
    'E1201 10:12:01.123456   4242 memcache.go:265] "Unhandled Error" err="couldn\'t get current server API group '
    'list: Get \\"http://localhost:8080/api?timeout=32s\\": dial tcp [::1]:8080: connect: connection refused"\n'
) * 5 + "The connection to the server localhost:8080 was refused - did you specify the right host or port?\n"


def test_kubectl_without_a_cluster_is_one_line_with_the_fix(prometheus_url: str, tmp_path: Path) -> None:
    """With no cluster context kubectl prints five raw client-go klog lines (`E1201 ... memcache.go:265
    "Unhandled Error"`, klog's `Lmmdd hh:mm:ss` header) before its own last word; reclaim says only that last
    word and what to run (exit 3)."""
    results: dict[Any, Result] = {
        re.compile(r"kubectl version --client"): Result(stdout="Client Version: v1.35.0"),
        re.compile(r"kubectl get .*"): Result(exited=1, stderr=KLOG_REFUSED),
    }
    with pytest.raises(Exit) as info:
        tasks.reclaim(
            MockContext(run=results, repeat=True), stack=_stack(tmp_path, False), prometheus=prometheus_url
        )
    assert info.value.code == 3
    message = str(info.value.message)
    assert len(message.splitlines()) == 1 and "memcache.go" not in message
    assert "localhost:8080 was refused" in message
    assert "run `invoke kubeconfig --stack reclaim-test` and export the KUBECONFIG it prints" in message


def test_prometheus_that_is_not_a_url_exits_2(tmp_path: Path) -> None:
    """`--prometheus notaurl` is bad input, not an unreachable server: exit 2, naming the flag, with no query
    in the message."""
    with pytest.raises(Exit) as info:
        tasks.reclaim(MockContext(), stack=_stack(tmp_path, False), prometheus="notaurl")
    assert info.value.code == 2
    assert str(info.value.message) == (
        "error: --prometheus: 'notaurl' is not an http(s) URL; give the server's base URL, e.g. http://localhost:9090"
    )
