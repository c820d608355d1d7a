"""Upgrades on the twin, as docs/deploy.md's upgrade runbook runs them: the rollout facts a deploy records through
the real Pulumi engine, and `invoke drain`: the real Kueue v0.19.2 controller holds the pool's ClusterQueues,
running kwok jobs finish on their own, nothing is evicted, and admission resumes on `--release`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from infra.deploy import deployed_facts
from infra.gpu_stack.gpu_operator import ADMITTED_POD_SELECTOR
from infra.rollout import rollout_facts
from infra.stackfile import load_stack
from infra.upgrade import HELD_BY
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import toolchain
from tests.twin.kube import Kube, job, name
from tests.twin.test_team_rules import BINPACK, EIGHT, condition, pods_of, workload_of
from twin import lifecycle
from twin.kwok import DURATION_ANNOTATION

NS = "vision"


def _running(kube: Kube, job_name: str) -> list[dict[str, Any]]:
    pods = pods_of(kube, NS, job_name)
    return pods if pods and all(p.get("status", {}).get("phase") == "Running" for p in pods) else []


def _queue(kube: Kube, queue: str) -> dict[str, Any]:
    return dict(json.loads(kube.ok("get", "clusterqueues.kueue.x-k8s.io", queue, "-o", "json")))


def _evicted(workload: dict[str, Any] | None) -> bool:
    return condition(workload, "Evicted") or condition(workload, "Preempted")


def _drain(bindir: Path, stack: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`invoke drain --stack STACK ARGS` as a user runs it, with the twin's kubectl as `kubectl`."""
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "invoke", "drain", "--stack", str(stack), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_drain_holds_admission_lets_running_jobs_finish_and_evicts_none(
    metal_twin: Kube, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kubectl").symlink_to(metal_twin.binary)
    doc = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    doc["config"]["gpufleet:cluster"]["kubeconfig"] = str(metal_twin.kubeconfig)
    stack = tmp_path / "Pulumi.metal.yaml"
    stack.write_text(yaml.safe_dump(doc))
    vision = metal_twin.as_member(("vision-team",))
    short, long, waiting = name("short"), name("long"), name("waiting")
    try:
        for job_name, seconds in ((short, "40"), (long, "3600")):
            made = job(job_name, NS, EIGHT, pod=BINPACK, annotations={DURATION_ANNOTATION: seconds})
            assert vision.create(made).ok
        for job_name in (short, long):
            pods = eventually(lambda j=job_name: _running(metal_twin, j), f"{job_name} running", 120)
            # what the GPU operator's driver upgrade waits for (infra.gpu_stack.gpu_operator)
            assert all(ADMITTED_POD_SELECTOR in p["metadata"]["labels"] for p in pods)

        # A bound too short for the jobs: drain says which still run, evicts nothing, keeps the queues held.
        first = _drain(bindir, stack, "--pools", "h100", "--bound", "2")
        assert first.returncode == 1, first.stderr
        (error,) = first.stderr.strip().splitlines()
        assert error.startswith("error: 2 workload(s) still run on h100 after 2 s: ")
        assert (
            f"{NS}/job-{short}-" in error and f"{NS}/job-{long}-" in error and "nothing was evicted" in error
        )
        for queue in ("vision", "nlp"):  # both teams' queues have an h100 flavor
            held = _queue(metal_twin, queue)
            assert held["spec"]["stopPolicy"] == "Hold" and held["metadata"]["annotations"][HELD_BY] == "h100"
        assert _running(metal_twin, short) and _running(metal_twin, long)

        # New work is not admitted while held (it would fit: vision's quota and what it may borrow).
        assert vision.create(job(waiting, NS, EIGHT, pod=BINPACK)).ok
        eventually(lambda: workload_of(metal_twin, NS, waiting), "the waiting job's Workload")

        # Its owner checkpoints and ends the long job; the short one finishes on its own within the bound.
        vision.delete("job", long, NS)
        second = _drain(bindir, stack, "--pools", "h100", "--bound", "180")
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip().splitlines()[-1].startswith("no job runs on h100: roll them now")
        finished = workload_of(metal_twin, NS, short)
        assert condition(finished, "Finished") and not _evicted(finished), finished
        assert all(p["status"]["phase"] == "Succeeded" for p in pods_of(metal_twin, NS, short))
        assert not condition(workload_of(metal_twin, NS, waiting), "Admitted")

        # Released: the held queues resume and the waiting job is admitted.
        released = _drain(bindir, stack, "--release")
        assert released.returncode == 0 and released.stdout.strip() == "released: nlp, vision", released
        eventually(
            lambda: condition(workload_of(metal_twin, NS, waiting), "Admitted"), "admission after release"
        )
        resumed = _queue(metal_twin, "vision")
        assert resumed["spec"]["stopPolicy"] == "None"
        assert HELD_BY not in resumed["metadata"].get("annotations", {})
    finally:
        _drain(bindir, stack, "--release")
        for job_name in (short, long, waiting):
            vision.delete("job", job_name, NS)


def test_the_deploy_records_the_rollout_facts_the_next_preview_compares(metal_twin: Kube) -> None:
    """The twin deployed the stack through the real Pulumi engine; its state holds the `rolloutFacts` output,
    read back the way `invoke preview` and `invoke deploy` read it."""
    assert metal_twin.twin is not None
    spec = lifecycle.twin_spec(load_stack(ROOT / "Pulumi.metal.yaml"), metal_twin.kubeconfig)
    saved = dict(os.environ)
    try:
        stack = lifecycle.stack(spec, metal_twin.twin.folder, toolchain(spec.cluster.kubernetes_version))
        facts = deployed_facts(spec, stack)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert facts == rollout_facts(spec)
    assert facts["pools"] == {
        "h100": {"kind": "hosts", "workload": "training"},
        "l40s": {"kind": "hosts", "workload": "training"},
    }
