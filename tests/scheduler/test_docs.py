"""docs/scheduling.md stays true: every YAML example is validated and checked against the compiled prod policy."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler import compile, kube_scheduler_config
from scheduler.checks import max_admitted_gpus
from scheduler.resources import gpu_resource, gpu_units
from scheduler.validation import core_problems
from tests.scheduler.examples import PROD, PROD_POOLS
from tests.scheduler.helpers import of_kind

DOC = Path(__file__).resolve().parents[2] / "docs" / "scheduling.md"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Kueue v0.19.2 apis/kueue/v1beta2/topology_types.go
TOPOLOGY_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TOPOLOGY_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
POOLS = {p.name: p for p in PROD_POOLS}


def examples() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def pod_templates(obj: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(replicas, pod template) of every pod set in a Job, PyTorchJob or RayJob."""
    spec = obj["spec"]
    if obj["kind"] == "Job":
        return [(spec.get("parallelism", 1), spec["template"])]
    if obj["kind"] == "PyTorchJob":
        return [(r["replicas"], r["template"]) for r in spec["pytorchReplicaSpecs"].values()]
    if obj["kind"] == "RayJob":
        cluster = spec["rayClusterSpec"]
        head = [(1, cluster["headGroupSpec"]["template"])]
        return head + [(g["replicas"], g["template"]) for g in cluster["workerGroupSpecs"]]
    raise AssertionError(obj["kind"])


def as_pod(obj: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


WORKLOADS = [e for e in examples() if e["kind"] in ("Job", "PyTorchJob", "RayJob")]


def test_the_doc_has_examples_of_every_kind_and_sharing_mode() -> None:
    kinds = [e["kind"] for e in examples()]
    assert {"Job", "PyTorchJob", "RayJob", "KubeSchedulerConfiguration"} <= set(kinds)
    text = DOC.read_text()
    for resource in ("nvidia.com/gpu:", "nvidia.com/gpu.shared:", "nvidia.com/mig-1g.10gb:"):
        assert resource in text


@pytest.mark.parametrize("example", WORKLOADS, ids=lambda e: f"{e['kind']}-{e['metadata']['name']}")
def test_workload_examples_are_valid_and_fit_the_compiled_queues(example: dict[str, Any]) -> None:
    objects = compile(PROD, PROD_POOLS)
    namespace = example["metadata"]["namespace"]
    labels = example["metadata"].get("labels", {})
    queues = {(q["metadata"]["namespace"], q["metadata"]["name"]): q for q in of_kind(objects, "LocalQueue")}
    assert (namespace, labels.get(QUEUE_LABEL, "default")) in queues
    if PRIORITY_LABEL in labels:
        assert labels[PRIORITY_LABEL] in {
            p["metadata"]["name"] for p in of_kind(objects, "WorkloadPriorityClass")
        }
    if example["kind"] == "Job":
        assert core_problems(example, PROD.kubernetes_version) == []
    team = next(t for t in PROD.teams if t.namespace == namespace)
    demand: dict[str, int] = {}
    for replicas, template in pod_templates(example):
        assert core_problems(as_pod(example, template), PROD.kubernetes_version) == []
        pool_name = template["spec"].get("nodeSelector", {}).get("gpufleet.io/pool")
        for container in template["spec"]["containers"]:
            requests = container["resources"].get("requests", {})
            for name, amount in requests.items():
                if not name.startswith("nvidia.com/"):
                    continue
                candidates = [p for p in PROD_POOLS if gpu_resource(p) == name]
                assert candidates, f"no pool offers {name}"
                if pool_name:
                    assert gpu_resource(POOLS[pool_name]) == name
                    candidates = [POOLS[pool_name]]
                assert amount <= gpu_units(candidates[0], candidates[0].gpus_per_node)  # one pod fits a node
                key = candidates[0].name
                demand[key] = demand.get(key, 0) + replicas * int(amount)
    for pool_name, units in demand.items():
        assert units <= gpu_units(POOLS[pool_name], max_admitted_gpus(team, POOLS[pool_name])), pool_name


def test_pytorchjob_and_rayjob_examples_have_the_shape_their_operators_and_kueue_need() -> None:
    pytorch = next(e for e in WORKLOADS if e["kind"] == "PyTorchJob")
    assert pytorch["apiVersion"] == "kubeflow.org/v1"
    specs = pytorch["spec"]["pytorchReplicaSpecs"]
    assert set(specs) <= {"Master", "Worker"} and specs["Master"]["replicas"] == 1
    # One topology domain for both pod sets: a podset group of exactly two, one with a single replica, with the
    # same topology request (kueue v0.19.2 apis/kueue/v1beta2/topology_types.go PodSetGroupName,
    # pkg/controller/jobframework/tas_validation.go).
    annotations = [spec["template"]["metadata"]["annotations"] for spec in specs.values()]
    assert len({a.get("kueue.x-k8s.io/podset-group-name") for a in annotations} - {None}) == 1
    assert all("kueue.x-k8s.io/podset-group-name" in a for a in annotations)
    assert len({a.get("kueue.x-k8s.io/podset-preferred-topology") for a in annotations}) == 1
    for spec in specs.values():
        assert set(spec) <= {"replicas", "restartPolicy", "template"}
        assert spec["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")
        assert [c["name"] for c in spec["template"]["spec"]["containers"]] == [
            "pytorch"
        ]  # operator convention
    ray = next(e for e in WORKLOADS if e["kind"] == "RayJob")
    assert ray["apiVersion"] == "ray.io/v1"
    assert ray["spec"]["shutdownAfterJobFinishes"] is True  # Kueue requires it for RayJobs
    cluster = ray["spec"]["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is False
    assert set(cluster) <= {"rayVersion", "enableInTreeAutoscaling", "headGroupSpec", "workerGroupSpecs"}
    for group in cluster["workerGroupSpecs"]:
        assert group["minReplicas"] == group["maxReplicas"] == group["replicas"]
        assert set(group) <= {
            "groupName",
            "replicas",
            "minReplicas",
            "maxReplicas",
            "rayStartParams",
            "template",
        }


def test_scheduler_profile_in_the_doc_is_the_compiled_one() -> None:
    documented = next(e for e in examples() if e["kind"] == "KubeSchedulerConfiguration")
    assert documented == kube_scheduler_config(PROD, PROD_POOLS)


def test_pool_table_matches_the_prod_pools() -> None:
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|.*?\| `([a-z0-9./-]+): ", DOC.read_text(), flags=re.M)
    assert {name: resource for name, resource in rows} == {p.name: gpu_resource(p) for p in PROD_POOLS}


def test_priority_table_matches_the_compiled_classes() -> None:
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (\d+) \|", DOC.read_text(), flags=re.M))
    assert {k: int(v) for k, v in rows.items()} == {p.name: p.value for p in PROD.priority_classes}


def _requests(template: dict[str, Any]) -> dict[str, float]:
    from scheduler.validation import _number

    out: dict[str, float] = {}
    for container in template["spec"]["containers"]:
        for name, amount in container.get("resources", {}).get("requests", {}).items():
            out[name] = out.get(name, 0) + _number(amount)
    return out


def test_slice_warning_uses_the_documented_slice_jobs() -> None:
    from scheduler.checks import EXAMPLE_SLICE_REQUESTS

    by_resource = {}
    for example in WORKLOADS:
        for _, template in pod_templates(example):
            requests = template["spec"]["containers"][0]["resources"]["requests"]
            by_resource.update({name: requests for name in requests if name.startswith("nvidia.com/")})
    for mode, resource in (("timeSlicing", "nvidia.com/gpu.shared"), ("mig", "nvidia.com/mig-1g.10gb")):
        requests = by_resource[resource]
        assert EXAMPLE_SLICE_REQUESTS[mode] == (
            int(requests["cpu"]),
            int(requests["memory"].removesuffix("Gi")),
        )


def test_sharing_pools_too_small_for_the_documented_jobs_are_warned_about() -> None:
    """h100-mig: 192 cores over 8 GPUs x 7 slices is 3.4 cores a slice, enough for the MIG example's 3 (4
    cores, which no node could give every slice, would not be); a node with half the cores is warned about."""
    from dataclasses import replace

    from scheduler.checks import warnings

    assert warnings(PROD_POOLS) == []
    halved = tuple(
        replace(p, cpus_per_node=p.cpus_per_node // 2) if p.name == "h100-mig" else p for p in PROD_POOLS
    )
    assert [w.split(" ")[0] for w in warnings(halved)] == ["gpufleet:nodePools[3]"]
    # The warning names only what is short: not "3.4 cores and 37 GiB, less than ... (4 cores, 32 GiB)",
    # since 37 GiB is more.
    (warned,) = warnings(halved)
    assert (
        "1.7 cores, fewer than the 3" in warned and "GiB" not in warned and "runs out of CPU before" in warned
    )


def test_every_row_of_the_team_table_names_the_twin_tests_that_show_it() -> None:
    """docs/scheduling.md "What a team can and cannot do": each row names at least one twin test
    (`test_name` in tests/twin/test_team_rules.py, or `file.py::test_name`), and each named test exists."""
    text = DOC.read_text()
    table = text[text.index("### What a team can and cannot do") : text.index("### Threat model")]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| a team")]
    twin = DOC.parents[1] / "tests" / "twin"
    assert len(rows) >= 10
    for row in rows:
        named = re.findall(r"`(?:(test_\w+\.py)::)?(test_\w+)`", row)
        assert named, row[:80]
        for module, test in named:
            source = (twin / (module or "test_team_rules.py")).read_text()
            assert f"def {test}(" in source, f"{module or 'test_team_rules.py'}::{test}"
