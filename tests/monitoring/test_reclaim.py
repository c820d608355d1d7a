"""`invoke reclaim`: idle pods from a real Prometheus (the same server and series as test_usage), workloads and
pods as `kubectl get -o json` returns them (answered by invoke's MockContext), the Kueue patch it applies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from invoke import Exit, MockContext, Result

import tasks
from infra.monitoring.reclaim import ANNOTATION
from tests.monitoring.test_usage import STACK, T, prometheus_url  # noqa: F401 (module fixture)


def _pod(name: str, controller_uid: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if controller_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": controller_uid, "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def _workload(
    name: str, owner_uid: str | None = None, job_uid_label: str | None = None, active: bool | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {}}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": owner_uid, "controller": True}
        ]
    if job_uid_label:
        meta["labels"]["kueue.x-k8s.io/job-uid"] = job_uid_label
    spec: dict[str, Any] = {"queueName": "default"}
    if active is not None:
        spec["active"] = active
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta, "spec": spec}


PODS = {
    "team-alpha": [
        *(_pod(f"a-{i}", "uid-train") for i in range(6)),
        _pod("a-6", "uid-nb"),
        _pod("a-7", "uid-nb"),
    ],
    "team-beta": [
        *(_pod(f"b-{i}", "uid-busy") for i in range(4)),
        _pod("nb-0", "uid-lab"),
        _pod("nb-1", "uid-lab"),
        _pod("x", None),
    ],
}
WORKLOADS = {
    "team-alpha": [_workload("job-train-1a2b3", "uid-train"), _workload("job-notebook-4c5d6", "uid-nb")],
    # beta's notebook workload is matched through Kueue's job-uid label; an inactive one is left alone.
    "team-beta": [
        _workload("job-busy-7e8f9", "uid-busy"),
        _workload("lab", job_uid_label="uid-lab"),
        _workload("old", "uid-lab", active=False),
    ],
}


def _ctx() -> MockContext:
    def listing(kind: str, ns: str, items: dict[str, list[dict[str, Any]]]) -> tuple[re.Pattern[str], Result]:
        return re.compile(rf"kubectl get {re.escape(kind)} -n {ns} -o json"), Result(
            stdout=json.dumps({"items": items[ns]})
        )

    results = dict(
        [
            *(listing("pods", ns, PODS) for ns in PODS),
            *(listing("workloads.kueue.x-k8s.io", ns, WORKLOADS) for ns in WORKLOADS),
            (re.compile(r"kubectl version --client"), Result(stdout="Client Version: v1.35.0")),
            (re.compile(r"kubectl patch .*"), Result()),
        ]
    )
    return MockContext(run=results, repeat=True)


def _stack(tmp_path: Path, reclaim: bool) -> str:
    config = yaml.safe_load(yaml.safe_dump(STACK))
    config["config"]["gpufleet:cluster"]["monitoring"]["reclaimIdle"] = reclaim
    path = tmp_path / "Pulumi.usage-test.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_dry_run_lists_only_workloads_whose_gpus_are_all_idle(
    prometheus_url: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ctx = _ctx()
    tasks.reclaim(ctx, stack=_stack(tmp_path, False), prometheus=prometheus_url, until=str(T))
    out = capsys.readouterr().out
    assert "team-alpha/job-notebook-4c5d6 (team alpha)" in out and "pods a-6, a-7" in out
    assert "team-beta/lab (team beta)" in out and "pods nb-0, nb-1" in out
    assert "job-train" not in out and "job-busy" not in out and "team-beta/old" not in out
    assert "would deactivate (dry run; --apply to act) 2 workload(s)" in out
    assert not [call for call in ctx.run.call_args_list if "kubectl patch" in call.args[0]]


def test_apply_deactivates_through_kueue_with_the_reason(prometheus_url: str, tmp_path: Path) -> None:  # noqa: F811
    """Workload v1beta2 `spec.active: false` (Kueue v0.19.2 apis/kueue/v1beta2/workload_types.go): Kueue evicts
    the workload and never readmits it until it is set back to true."""
    ctx = _ctx()
    tasks.reclaim(ctx, stack=_stack(tmp_path, True), prometheus=prometheus_url, until=str(T), apply=True)
    patches = [call.args[0] for call in ctx.run.call_args_list if "kubectl patch" in call.args[0]]
    assert len(patches) == 2
    first = patches[0]
    assert first.startswith(
        "kubectl patch workloads.kueue.x-k8s.io job-notebook-4c5d6 -n team-alpha --type merge -p "
    )
    body = json.loads(first.split(" -p ", 1)[1].strip("'"))
    assert body["spec"] == {"active": False}
    assert "below 5% utilisation for more than 2h (team alpha)" in body["metadata"]["annotations"][ANNOTATION]


def test_apply_needs_reclaim_idle(tmp_path: Path) -> None:
    with pytest.raises(Exit) as info:
        tasks.reclaim(MockContext(), stack=_stack(tmp_path, False), apply=True)
    assert info.value.code == 2 and "reclaimIdle" in str(info.value.message)
