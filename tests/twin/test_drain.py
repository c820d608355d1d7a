"""`invoke drain` on the twin: the real Kueue v0.19.2 controller holds the pool's ClusterQueues, running kwok
jobs finish on their own, nothing is evicted, and admission resumes on release (docs/deploy.md, "Upgrades")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from invoke import Context

from infra.errors import CheckFailed
from infra.monitoring.workloads import StackKubectl
from infra.stackfile import load_stack
from infra.upgrade import HELD_BY, drain, release, wait_for_jobs
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.kube import Kube, job, name
from tests.twin.test_team_rules import BINPACK, EIGHT, condition, pods_of, workload_of
from twin.kwok import DURATION_ANNOTATION

NS = "vision"


def _run(command: str, **kwargs: Any) -> Any:
    """invoke's Context.run as the task gives it, reading no stdin (pytest captures it)."""
    return Context().run(command, **{"in_stream": False, **kwargs})


def _running(kube: Kube, job_name: str) -> list[dict[str, Any]]:
    pods = pods_of(kube, NS, job_name)
    return pods if pods and all(p.get("status", {}).get("phase") == "Running" for p in pods) else []


def _queue(kube: Kube, queue: str) -> dict[str, Any]:
    return dict(json.loads(kube.ok("get", "clusterqueues.kueue.x-k8s.io", queue, "-o", "json")))


def _evicted(workload: dict[str, Any] | None) -> bool:
    return condition(workload, "Evicted") or condition(workload, "Preempted")


def test_drain_holds_admission_lets_running_jobs_finish_and_evicts_none(
    metal_twin: Kube, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "kubectl").symlink_to(metal_twin.binary)  # drain runs `kubectl`, the twin's own client here
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    spec = load_stack(ROOT / "Pulumi.metal.yaml")
    cluster = spec.cluster.model_copy(
        update={"kubeconfig": str(metal_twin.kubeconfig), "kubeconfig_context": None}
    )
    spec = spec.model_copy(update={"cluster": cluster})
    run = _run
    vision = metal_twin.as_member(("vision-team",))
    short, long, waiting = name("short"), name("long"), name("waiting")
    lines: list[str] = []
    try:
        for job_name, seconds in ((short, "40"), (long, "3600")):
            made = job(job_name, NS, EIGHT, pod=BINPACK, annotations={DURATION_ANNOTATION: seconds})
            assert vision.create(made).ok
        for job_name in (short, long):
            eventually(lambda j=job_name: _running(metal_twin, j), f"{job_name} running", 120)

        # A bound too short for the jobs: drain says which still run, evicts nothing, keeps the queues held.
        with pytest.raises(CheckFailed) as info:
            drain(spec, ["h100"], 2, run, lines.append)
        assert short in str(info.value) and long in str(info.value)
        for queue in ("vision", "nlp"):  # both teams' queues have an h100 flavor
            held = _queue(metal_twin, queue)
            assert held["spec"]["stopPolicy"] == "Hold" and held["metadata"]["annotations"][HELD_BY] == "h100"
        assert _running(metal_twin, short) and _running(metal_twin, long)

        # New work is not admitted while held.
        assert vision.create(job(waiting, NS, EIGHT, pod=BINPACK)).ok
        eventually(lambda: workload_of(metal_twin, NS, waiting), "the waiting job's Workload")

        # Its owner checkpoints and ends the long job; the short one finishes on its own within the bound.
        vision.delete("job", long, NS)
        kubectl = StackKubectl(spec, run)
        assert wait_for_jobs(kubectl, ["h100"], 180, lines.append, poll_s=1) == []
        finished = workload_of(metal_twin, NS, short)
        assert condition(finished, "Finished") and not _evicted(finished), finished
        assert all(p["status"]["phase"] == "Succeeded" for p in pods_of(metal_twin, NS, short))
        assert not condition(workload_of(metal_twin, NS, waiting), "Admitted")

        # Released: the held queues resume and the waiting job is admitted.
        assert sorted(release(kubectl)) == ["nlp", "vision"]
        eventually(
            lambda: condition(workload_of(metal_twin, NS, waiting), "Admitted"), "admission after release"
        )
        resumed = _queue(metal_twin, "vision")
        assert resumed["spec"]["stopPolicy"] == "None" and HELD_BY not in resumed["metadata"].get(
            "annotations", {}
        )
    finally:
        release(StackKubectl(spec, run))
        for job_name in (short, long, waiting):
            vision.delete("job", job_name, NS)
    assert any(line.startswith("running on h100: ") for line in lines), lines
