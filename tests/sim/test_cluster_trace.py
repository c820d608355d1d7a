"""The rows of `invoke trace --from-cluster` from Workload and node objects as Kueue v0.19.2 and the API
server write them (the twin test, tests/twin/test_cluster_trace.py, reads real ones)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from infra.scheduling import pool_view
from scheduler.sim.cluster_trace import cluster_trace, gpu_columns, pod_requests, workload_priority_class
from tests.conftest import ROOT, load_example


def _pools(stack: str) -> dict[str, Any]:
    spec = load_example(stack)
    return {p.name: pool_view(spec, p) for p in spec.node_pools}


def test_shares_are_their_fraction_of_a_gpu_and_whole_gpus_stay_whole() -> None:
    metal = _pools("metal")  # l40s: time-slicing, 2 replicas
    assert gpu_columns(metal["h100"], 4) == (4, 1000)
    assert gpu_columns(metal["l40s"], 1) == (1, 500)
    assert gpu_columns(metal["l40s"], 2) == (1, 1000)  # both replicas: the whole GPU
    mig = next(p for p in _pools("example-prod").values() if p.sharing == "mig")
    per_gpu = mig.mig_instances_per_gpu or 1
    assert gpu_columns(mig, 1) == (1, round(1000 / per_gpu))


def test_pod_requests_sum_the_containers_and_take_the_largest_init_container() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                       {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "4", "memory": "512Mi"}}}],
    }  # fmt: skip
    asked = pod_requests(spec)
    assert asked["cpu"] == 4.0 and asked["memory"] == 2**30 and asked["nvidia.com/gpu"] == 2.0


def test_only_a_workload_priority_class_names_the_priority() -> None:
    assert workload_priority_class({"priorityClassRef": {"group": "kueue.x-k8s.io",
                                    "kind": "WorkloadPriorityClass", "name": "urgent"}}) == "urgent"  # fmt: skip
    assert workload_priority_class({"priorityClassRef": {"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                                         "name": "system-node-critical"}}) == ""  # fmt: skip
    assert workload_priority_class({"priorityClassName": "low",
                                    "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass"}) == "low"  # fmt: skip


def _workload(
    name: str, created: str, admitted: str | None, finished: str | None, flavor: str
) -> dict[str, Any]:
    conditions = [{"type": t, "status": "True", "lastTransitionTime": at}
                  for t, at in (("Admitted", admitted), ("Finished", finished)) if at]  # fmt: skip
    template = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}
    return {
        "metadata": {"name": name, "namespace": "vision", "creationTimestamp": created},
        "spec": {"queueName": "default", "podSets": [{"name": "main", "count": 1, "template": template}]},
        "status": {"conditions": conditions,
                   "admission": {"podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": flavor}}]}},
    }  # fmt: skip


def test_unfinished_and_foreign_workloads_are_counted_not_written() -> None:
    spec = load_example("metal")
    pools = [pool_view(spec, p) for p in spec.node_pools]
    workloads = [
        _workload("late", "2026-01-01T00:00:30Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:40Z", "h100"),
        _workload("early", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", "2026-01-01T00:00:15Z", "h100"),
        _workload("running", "2026-01-01T00:00:10Z", "2026-01-01T00:00:11Z", None, "h100"),
        _workload(
            "elsewhere", "2026-01-01T00:00:10Z", "2026-01-01T00:00:11Z", "2026-01-01T00:00:12Z", "a100"
        ),
    ]
    trace = cluster_trace(workloads, [], pools, {"vision": "vision"})
    assert [(r["name"], r["arrival"], r["duration"]) for r in trace.jobs] == [("early", 0.0, 10.0),
                                                                               ("late", 30.0, 60.0)]  # fmt: skip
    assert sum(trace.skipped.values()) == 2 and len(trace.skipped) == 2, trace.skipped


def test_trace_without_a_source_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "invoke", "trace", "--stack", "metal", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "--from-cluster" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())
