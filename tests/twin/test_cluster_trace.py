"""`invoke trace --from-cluster` on the metal stack's twin, as docs/simulation.md writes it: jobs run by the
real Kueue and scheduler, their Workloads read back as the trace `invoke simulate` replays, each row checked against what the job asked and how
long it was given to run (kwok ends a pod after its `gpufleet.io/twin-duration`)."""

from __future__ import annotations

import csv
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from infra.simulate.dynamic import stack_world
from scheduler.sim.timed_traces import read_timed_pods
from scheduler.sim.traces import read_nodes
from tests.conftest import ROOT, load_example
from tests.support import eventually
from tests.twin.kube import Kube, job, name
from tests.twin.test_team_rules import BINPACK, condition, workload_of
from twin.kwok import DURATION_ANNOTATION

pytestmark = pytest.mark.e2e

RUN_S = 4


def _docs_command() -> list[str]:
    """docs/simulation.md's `invoke trace` line, as the page writes it."""
    text = (ROOT / "docs" / "simulation.md").read_text()
    (line,) = [ln for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
               for ln in block.splitlines() if ln.startswith("invoke trace")]  # fmt: skip
    return shlex.split(line)


def _trace(kube: Kube, out: Path) -> subprocess.CompletedProcess[str]:
    """The page's command against the twin (KUBECONFIG, kubectl on PATH), its `--out` moved to `out`: the page's
    folder, build/metal/, is where the render tests write."""
    argv = _docs_command()
    argv[argv.index("--out") + 1] = str(out)
    kubectl_dir = str(Path(kube.binary).parent)
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PATH": f"{kubectl_dir}:{os.environ['PATH']}", "KUBECONFIG": str(kube.kubeconfig)},
    )  # fmt: skip


def test_a_clusters_finished_jobs_become_a_trace_the_simulator_replays(
    metal_twin: Kube, tmp_path: Path
) -> None:
    kube = metal_twin
    runs = {  # job: (team, requests per pod, pods, expected num_gpu, gpu_milli, gpu_spec)
        name("tr-pair"): ("vision", {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 2}, 1, 2, 1000, "H100"),
        name("tr-share"): (
            "nlp",
            {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu.shared": 1},
            1,
            1,
            500,
            "L40S",
        ),
        name("tr-gang"): ("vision", {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": 1}, 2, 1, 1000, "H100"),
    }
    running = name("tr-long")
    for job_name, (team, requests, pods, *_) in runs.items():
        created = kube.create(job(job_name, team, requests, queue="default", pod=dict(BINPACK),
                                  parallelism=pods, annotations={DURATION_ANNOTATION: str(RUN_S)}))  # fmt: skip
        assert created.ok, created.err
    long_job = job(running, "nlp", {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": 1}, queue="default",
                   pod=dict(BINPACK), annotations={DURATION_ANNOTATION: "3600"})  # fmt: skip
    assert kube.create(long_job).ok
    try:

        def finished() -> dict[str, str] | None:
            found = {j: workload_of(kube, runs[j][0], j) for j in runs}
            long_admitted = condition(workload_of(kube, "nlp", running), "Admitted")
            if all(condition(w, "Finished") for w in found.values()) and long_admitted:
                return {j: str(w["metadata"]["name"]) for j, w in found.items() if w}
            return None

        workloads = eventually(finished, "the three short jobs finished and the long one admitted", timeout=180,
                               every=2)  # fmt: skip
        done = _trace(kube, tmp_path / "trace")
        assert done.returncode == 0, done.stderr
        assert "left out:" in done.stdout and "not finished" in done.stdout, done.stdout
        with (tmp_path / "trace" / "pods.csv").open() as f:
            rows = {r["name"]: r for r in csv.DictReader(f)}
        mine = [rows[workloads[j]] for j in runs]  # in submission order
        for row, (team, requests, pods, num_gpu, milli, model) in zip(mine, runs.values(), strict=True):
            assert (row["team"], row["queue"], row["gpu_spec"]) == (team, "default", model), row
            assert (int(row["num_gpu"]), int(row["gpu_milli"]), int(row["pods"])) == (num_gpu, milli, pods), (
                row
            )
            assert int(row["cpu_milli"]) == int(requests["cpu"]) * 1000, row
            # admitted -> finished: the pods' run time, plus start-up and Kueue noticing the end
            assert RUN_S <= float(row["duration"]) < RUN_S + 60, row
        arrivals = [float(r["arrival"]) for r in mine]
        assert arrivals == sorted(arrivals), arrivals
        assert not [r for r in rows.values() if r["name"].startswith(running)], (
            "a running job has no duration"
        )

        nodes = read_nodes(tmp_path / "trace" / "nodes.csv")
        spec = load_example("metal")
        by_pool = {p.name: p for p in spec.node_pools}
        assert sorted(nodes.names) == sorted(h for p in spec.node_pools for h in p.hosts or ())
        for node_name, gpus, model in zip(nodes.names, nodes.num_gpu, nodes.gpu_model, strict=True):
            pool = next(p for p in by_pool.values() if node_name in (p.hosts or ()))
            assert (int(gpus), model) == (pool.gpus_per_node, pool.gpu_model), node_name
        trace = read_timed_pods(tmp_path / "trace" / "pods.csv")
        world = stack_world(spec, trace)
        assert len(world.world.jobs.arrival) == len(rows)
    finally:
        for job_name, (team, *_) in runs.items():
            kube.ok("delete", "job", job_name, "-n", team, "--wait=false")
        kube.ok("delete", "job", running, "-n", "nlp", "--wait=false")
