"""Reclaim on the twin: what deactivating a Workload (`spec.active: false`) does to each integration
the stack enables, decided by the real Kueue v0.19.2 controller, and reclaim's matching and warning against the
real objects Kueue and the API server produce. docs/operations.md "Reclaiming idle GPUs" states the results.

The twin runs the kube-controller-manager (the batch Job controller) but no framework operators: PyTorchJob and
RayJob are served as CRDs, so Kueue's side (the suspend flag it sets and clears) is what is observed there.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from infra.monitoring.evidence import Evidence
from infra.monitoring.reclaim import (
    OPT_OUT,
    WARNED,
    Decision,
    TeamPolicy,
    decide,
    opted_out,
    resolve_owners,
    rfc3339,
    workload_pods,
)
from tests.support import eventually
from tests.twin.kube import Kube, job, name, pod
from tests.twin.test_team_rules import BINPACK, condition, workload_of

GPU = "nvidia.com/gpu"
ONE = {"cpu": "1", "memory": "4Gi", GPU: 1}
NS = "vision"


def _template(container: str = "main") -> dict[str, Any]:
    return {
        "spec": {
            **BINPACK,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": container,
                    "image": "registry.example/train:1",
                    "resources": {"requests": ONE, "limits": ONE},
                }
            ],
        }
    }


def _deactivate(kube: Kube, workload: str, active: bool) -> None:
    patch = json.dumps({"spec": {"active": active}})
    kube.ok("patch", "workloads.kueue.x-k8s.io", workload, "-n", NS, "--type", "merge", "-p", patch)


def _admitted(kube: Kube, owner: str) -> dict[str, Any]:
    return dict(
        eventually(
            lambda: (wl := workload_of(kube, NS, owner)) and condition(wl, "Admitted") and wl,
            f"the admission of {owner}",
            120,
        )
    )


def _evicted_deactivated(kube: Kube, owner: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        wl = workload_of(kube, NS, owner)
        conds = {c["type"]: c for c in (wl or {}).get("status", {}).get("conditions", [])}
        evicted = conds.get("Evicted", {})
        ok = evicted.get("status") == "True" and evicted.get("reason") == "Deactivated"
        return wl if ok and not condition(wl, "Admitted") else None

    return dict(eventually(check, f"{owner} evicted as Deactivated", 90))


def _get(kube: Kube) -> Any:
    def get(ns: str, api_version: str, kind: str, name_: str) -> dict[str, Any] | None:
        group, _, version = api_version.rpartition("/")
        result = kube.attempt(
            "get", f"{kind}.{version}.{group}" if group else kind, name_, "-n", ns, "-o", "json"
        )
        return dict(json.loads(result.out)) if result.ok else None

    return get


def test_a_batch_job_is_suspended_on_deactivation_and_resumes_on_reactivation(metal_twin: Kube) -> None:
    """Kueue v0.19.2 pkg/controller/jobs/job/job_controller.go `Suspend` (spec.suspend: true; the Job controller
    then deletes the pods) and site/content/en/docs/concepts/workload.md ("evicted and not be requeued" while
    inactive); reactivation admits it again and Kueue unsuspends the Job, whose controller creates new pods."""
    vision = metal_twin.as_member(("vision-team",))
    job_name = name("rc-job")
    assert vision.create(job(job_name, NS, ONE, pod=BINPACK)).ok
    try:
        wl = _admitted(metal_twin, job_name)["metadata"]["name"]
        selector = f"batch.kubernetes.io/job-name={job_name}"
        first = eventually(lambda: metal_twin.items("pods", NS, selector), "the job's pod")
        _deactivate(metal_twin, wl, False)
        _evicted_deactivated(metal_twin, job_name)
        assert metal_twin.get("job", job_name, NS)["spec"]["suspend"] is True
        eventually(
            lambda: (
                not [
                    p
                    for p in metal_twin.items("pods", NS, selector)
                    if not p["metadata"].get("deletionTimestamp")
                ]
            ),
            "the job's pods deleted",
        )
        # Inactive, it is not requeued: a job of the same queue created after it is admitted (Kueue has run
        # its scheduling cycles since), and the inactive one still holds no quota.
        probe = name("rc-probe")
        assert vision.create(job(probe, NS, ONE, pod=BINPACK)).ok
        _admitted(metal_twin, probe)
        assert not condition(workload_of(metal_twin, NS, job_name), "QuotaReserved")
        metal_twin.ok("delete", "job", probe, "-n", NS, "--wait=false")
        _deactivate(metal_twin, wl, True)
        _admitted(metal_twin, job_name)
        eventually(
            lambda: metal_twin.get("job", job_name, NS)["spec"].get("suspend") is False, "the job resumed"
        )
        again = eventually(
            lambda: [
                p
                for p in metal_twin.items("pods", NS, selector)
                if not p["metadata"].get("deletionTimestamp")
            ],
            "a new pod of the resumed job",
        )
        assert {p["metadata"]["uid"] for p in again}.isdisjoint(p["metadata"]["uid"] for p in first)
    finally:
        vision.delete("job", job_name, NS)


def test_a_plain_pod_is_deleted_as_end_of_life_and_its_workload_goes_with_it(metal_twin: Kube) -> None:
    """Kueue v0.19.2 pkg/controller/jobs/pod/pod_controller.go `Stop`: the pod gets the TerminationTarget
    condition and is deleted ("this should mark the pod's end of life"); with its only owner gone the Workload
    is removed as well, so there is nothing left to set back to `spec.active: true` and nothing recreates a
    bare pod. Reclaim therefore never acts on pod-based workloads."""
    vision = metal_twin.as_member(("vision-team",))
    pod_name = name("rc-pod")
    obj = pod(pod_name, NS, ONE, **BINPACK, restartPolicy="Never")
    assert vision.create(obj).ok
    try:
        wl = _admitted(metal_twin, pod_name)["metadata"]["name"]
        _deactivate(metal_twin, wl, False)

        def gone() -> bool:
            result = metal_twin.attempt("get", "pod", pod_name, "-n", NS, "-o", "json")
            return not result.ok or bool(json.loads(result.out)["metadata"].get("deletionTimestamp"))

        eventually(gone, "the pod deleted", 90)
        eventually(
            lambda: not metal_twin.attempt("get", "workloads.kueue.x-k8s.io", wl, "-n", NS).ok,
            "the Workload removed",
            90,
        )
        reactivate = metal_twin.attempt(
            "patch",
            "workloads.kueue.x-k8s.io",
            wl,
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            '{"spec":{"active":true}}',
        )
        assert not reactivate.ok and "NotFound" in reactivate.err
    finally:
        vision.delete("pod", pod_name, NS)


def _pytorchjob(job_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job_name, "namespace": NS},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": _template("pytorch")}}},
    }


def _rayjob(job_name: str) -> dict[str, Any]:
    head = {"spec": {**BINPACK, "containers": [{"name": "head", "image": "rayproject/ray:2.9.0",
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}}]}}  # fmt: skip
    worker = _template("worker")
    worker["spec"].pop("restartPolicy")
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": job_name, "namespace": NS},
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": head},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": 1,
                        "minReplicas": 1,
                        "maxReplicas": 1,
                        "rayStartParams": {},
                        "template": worker,
                    }
                ],
            },
        },
    }


def _suspended(obj: dict[str, Any]) -> bool:
    """RayJob's `suspend` is a plain bool with omitempty: false is absent from the object."""
    spec = obj["spec"]
    return bool(
        spec.get("runPolicy", {}).get("suspend") if obj["kind"] == "PyTorchJob" else spec.get("suspend")
    )


@pytest.mark.parametrize("make", [_pytorchjob, _rayjob], ids=["pytorchjob", "rayjob"])
def test_framework_jobs_are_suspended_and_resumed_by_kueue(metal_twin: Kube, make: Any) -> None:
    """Kueue v0.19.2 pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go (`Suspend` sets
    runPolicy.suspend, `RunWithPodSetsInfo` clears it) and pkg/controller/jobs/rayjob/rayjob_controller.go
    (spec.suspend): deactivation suspends the job object, reactivation readmits and unsuspends it; the
    framework's operator then stops and recreates the pods."""
    obj = make(name("rc-fw"))
    job_name, kind = obj["metadata"]["name"], f"{obj['kind'].lower()}s.{obj['apiVersion'].split('/')[0]}"
    created = metal_twin.create(obj)
    assert created.ok, created.err
    try:
        wl = _admitted(metal_twin, job_name)["metadata"]["name"]
        eventually(
            lambda: _suspended(metal_twin.get(kind, job_name, NS)) is False, "the job started by Kueue"
        )
        _deactivate(metal_twin, wl, False)
        _evicted_deactivated(metal_twin, job_name)
        eventually(lambda: _suspended(metal_twin.get(kind, job_name, NS)) is True, "the job suspended")
        _deactivate(metal_twin, wl, True)
        _admitted(metal_twin, job_name)
        eventually(lambda: _suspended(metal_twin.get(kind, job_name, NS)) is False, "the job resumed")
    finally:
        metal_twin.delete(kind, job_name, NS)


def test_reclaim_matches_pods_and_opt_out_through_the_owner_chain(metal_twin: Kube) -> None:
    """Kueue v0.19.2 `jobframework.NewWorkload` (pkg/controller/jobframework/utils.go) copies only
    provreq.kueue.x-k8s.io/ annotations from the job to its Workload, so an opt-out on the job is not on the
    Workload: reclaim finds it through the Workload's owner. The pods are found through their controller
    chain; the warning (merge patch and core/v1 Event) is accepted by the real API server and shown on the
    Workload, and a null in the merge patch removes it again."""
    vision = metal_twin.as_member(("vision-team",))
    job_name = name("rc-optout")
    obj = job(job_name, NS, ONE, pod=BINPACK, parallelism=2)
    obj["metadata"]["annotations"] = {OPT_OUT: "never"}
    assert vision.create(obj).ok
    try:
        wl_obj = _admitted(metal_twin, job_name)
        selector = f"batch.kubernetes.io/job-name={job_name}"
        pods = eventually(
            lambda: (found := metal_twin.items("pods", NS, selector)) and len(found) == 2 and found, "2 pods"
        )
        assert OPT_OUT not in (wl_obj["metadata"].get("annotations") or {})
        others = metal_twin.items("pods", NS)
        owners = resolve_owners(others, [wl_obj], _get(metal_twin))
        matched = workload_pods(wl_obj, others, owners)
        assert sorted(p["metadata"]["name"] for p in matched) == sorted(p["metadata"]["name"] for p in pods)
        assert opted_out(wl_obj, matched, owners)

        meta = wl_obj["metadata"]
        warn = Decision("warn", "vision", NS, meta["name"], meta["uid"], (), "GPUs idle (twin test)")
        at = time.time()
        patch = json.dumps(warn.patch(at))
        metal_twin.ok(
            "patch", "workloads.kueue.x-k8s.io", meta["name"], "-n", NS, "--type", "merge", "-p", patch
        )
        assert (
            WARNED in metal_twin.get("workloads.kueue.x-k8s.io", meta["name"], NS)["metadata"]["annotations"]
        )
        metal_twin.ok("create", "-f", "-", stdin=json.dumps(warn.event(at)))
        events = metal_twin.items("events", NS)
        shown = [e for e in events if e["involvedObject"].get("uid") == meta["uid"]]
        assert any(e["reason"] == "GpuIdleReclaimWarning" and e["type"] == "Warning" for e in shown), shown
        clear = json.dumps(Decision("clear", "vision", NS, meta["name"], meta["uid"], (), "").patch(at))
        metal_twin.ok(
            "patch", "workloads.kueue.x-k8s.io", meta["name"], "-n", NS, "--type", "merge", "-p", clear
        )
        after = (
            metal_twin.get("workloads.kueue.x-k8s.io", meta["name"], NS)["metadata"].get("annotations") or {}
        )
        assert WARNED not in after
    finally:
        vision.delete("job", job_name, NS)


def test_a_member_cannot_opt_a_workload_out_of_reclaim_the_platform_decides(metal_twin: Kube) -> None:
    """Role `edit` lets a member annotate their own job at any time, also after reclaim's warning (the API server
    accepts it). Reclaim reads the annotation through the Workload's real owner chain, and honours it only for
    a team the platform lets opt out (`teams[].reclaimIdle.allowOptOut`): otherwise the idle workload is still
    deactivated, and the decision says the opt-out was not honoured."""
    vision = metal_twin.as_member(("vision-team",))
    job_name = name("rc-late")
    assert vision.create(job(job_name, NS, ONE, pod=BINPACK)).ok
    try:
        wl = _admitted(metal_twin, job_name)
        warned = {"metadata": {"annotations": {WARNED: rfc3339(time.time() - 7200)}}}
        metal_twin.ok("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "-n", NS, "--type", "merge",
                      "-p", json.dumps(warned))  # fmt: skip
        annotated = vision.attempt("annotate", "job", job_name, "-n", NS, f"{OPT_OUT}=never")
        assert annotated.ok, annotated.err
        wl = metal_twin.get("workloads.kueue.x-k8s.io", wl["metadata"]["name"], NS)
        selector = f"batch.kubernetes.io/job-name={job_name}"
        pods = eventually(lambda: metal_twin.items("pods", NS, selector), "the job's pod")
        owners = resolve_owners(pods, [wl], _get(metal_twin))
        now = time.time()
        # what Prometheus would say of the job's pod: idle all window, seen just now, its node's exporter up
        seen = Evidence({(NS, p["metadata"]["name"]) for p in pods}, {(NS, p["metadata"]["name"]): now for p in pods},
                        {p["spec"]["nodeName"]: 1.0 for p in pods}, {}, 90.0)  # fmt: skip
        decisions = {
            allowed: decide(TeamPolicy("vision", NS, "1h", "1h", "0s", allowed), wl,
                            workload_pods(wl, pods, owners), seen, owners, now)
            for allowed in (False, True)
        }  # fmt: skip
        assert decisions[False].action == "deactivate" and "not honoured" in decisions[False].reason
        assert decisions[True].action == "skip" and "opts out" in decisions[True].reason
    finally:
        vision.delete("job", job_name, NS)


def test_a_member_cannot_reactivate_a_workload_the_platform_team_does(metal_twin: Kube) -> None:
    """Team groups may only get, list and watch Workloads (Kueue v0.19.2
    charts/kueue/templates/rbac/workload_viewer_role.yaml, the only Workload role aggregated into
    kueue-batch-user-role and `edit`): the patch docs/operations.md gives the platform team is forbidden to a
    member, and works for the platform (here the admin)."""
    vision = metal_twin.as_member(("vision-team",))
    job_name = name("rc-back")
    assert vision.create(job(job_name, NS, ONE, pod=BINPACK)).ok
    try:
        wl = _admitted(metal_twin, job_name)["metadata"]["name"]
        _deactivate(metal_twin, wl, False)
        _evicted_deactivated(metal_twin, job_name)
        back = json.dumps({"spec": {"active": True}})
        tried = vision.attempt(
            "patch", "workloads.kueue.x-k8s.io", wl, "-n", NS, "--type", "merge", "-p", back
        )
        assert not tried.ok and "forbidden" in tried.err.lower(), tried.err
        _deactivate(metal_twin, wl, True)
        _admitted(metal_twin, job_name)
    finally:
        vision.delete("job", job_name, NS)
