"""The compiled team rules' CEL evaluated with cel-python (tests/scheduler/cel.py adds the Kubernetes libraries):
fast feedback on what each rule means. The real API server, with Kueue's webhooks, decides on the twin
(tests/twin/test_team_rules.py, test_admission_rules.py, test_cpu_work.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scheduler import compile
from scheduler.admission import PODS
from scheduler.identities import KUEUE_USER
from scheduler.job_control import GRACE, JOB_START
from scheduler.job_kinds import REFUSED_KINDS
from scheduler.kueue_gaps import PARALLELISM
from scheduler.ownership import OWNERS
from scheduler.pod_templates import TEMPLATE_POLICY
from scheduler.tenancy import DISRUPTION_BUDGETS
from tests.scheduler.cel import refusals
from tests.scheduler.examples import METAL, METAL_POOLS, PROD, PROD_POOLS
from tests.scheduler.helpers import find
from tests.scheduler.test_docs import WORKLOADS as DOC_WORKLOADS

OBJECTS = compile(METAL, METAL_POOLS)
MEMBER = "alice@example.com"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def policy(name: str, objects: list[dict[str, Any]] = OBJECTS) -> dict[str, Any]:
    return find(objects, "ValidatingAdmissionPolicy", name)


def pod(requests: dict[str, Any], queue: str = "", **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "resources": {"requests": requests, "limits": requests}}
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    body = {"containers": [container], "schedulerName": "gpu-binpack", "terminationGracePeriodSeconds": 30}
    return {"metadata": {"name": "p", "labels": labels}, "spec": {**body, **spec}}


def job(template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "default"}
    return {"metadata": {"name": "j", "labels": labels}, "spec": {"template": template, **spec}}


# ---- a zero quantity is no GPU request ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "allowed"),
    [({"cpu": "1", "nvidia.com/gpu": "1"}, True), ({"cpu": "1", "nvidia.com/gpu": "0"}, False),
     ({"cpu": "1", "nvidia.com/gpu.shared": "0"}, False), ({"cpu": "1"}, False)],
)  # fmt: skip
def test_only_a_positive_gpu_request_may_tolerate_the_gpu_taint(
    requests: dict[str, str], allowed: bool
) -> None:
    refused = refusals(policy(PODS), pod(requests, tolerations=TOLERATE_GPU))
    assert (not any("must request a GPU resource" in m for m in refused)) is allowed, refused


def test_a_zero_gpu_job_is_cpu_work_for_the_queue_rules() -> None:
    template = {"spec": pod({"cpu": "16", "nvidia.com/gpu": 0})["spec"]}
    refused = refusals(policy(f"{TEMPLATE_POLICY}-jobs"), job(template))
    assert any("goes to the 'cpu' queue" in m for m in refused), refused


@pytest.mark.parametrize(
    ("requests", "zero"),
    [({"cpu": "1", "nvidia.com/gpu": "1"}, False), ({"cpu": "1", "nvidia.com/gpu": "0"}, True),
     ({"cpu": "1", "nvidia.com/gpu": "000"}, True), ({"cpu": "1", "nvidia.com/mig-1g.10gb": "0"}, False),
     ({"cpu": "1"}, False)],
)  # fmt: skip
def test_a_zero_gpu_quantity_is_refused_only_where_the_api_server_adds_the_toleration(
    requests: dict[str, str], zero: bool
) -> None:
    """On aws (EKS's ExtendedResourceToleration) a pod or template naming a GPU resource at 0 is refused; on an
    existing cluster the same request is CPU work."""
    prod = compile(PROD, PROD_POOLS)
    template = {"spec": pod(requests, queue="cpu")["spec"]}
    for name in (PODS, f"{TEMPLATE_POLICY}-jobs"):
        obj = pod(requests, queue="cpu") if name == PODS else job(template)
        on_aws = refusals(policy(name, prod), obj, namespace="team-research")
        assert any("ExtendedResourceToleration" in m for m in on_aws) is zero, (name, on_aws)
        assert not any("ExtendedResourceToleration" in m for m in refusals(policy(name), obj)), name


@pytest.mark.parametrize(
    ("parallelism", "completions", "allowed"), [(2, 2, True), (1, 4, True), (4, 2, False), (4, None, True)]
)
def test_a_job_asks_at_most_its_completions_at_once(
    parallelism: int, completions: int | None, allowed: bool
) -> None:
    spec = {"parallelism": parallelism, **({"completions": completions} if completions else {})}
    obj = job({"spec": pod({"cpu": "1"}, queue="cpu")["spec"]}, **spec)
    refused = refusals(policy(f"{PARALLELISM}-jobs"), obj)
    assert (not refused) is allowed, refused
    assert not refusals(policy(f"{PARALLELISM}-jobs"), obj, user=JOB_CONTROLLER)


# ---- cores and memory per GPU ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "allowed"),
    [
        ({"cpu": "24", "memory": "256Gi", "nvidia.com/gpu": "1"}, True),  # h100: 192 cores, 2 TiB, 8 GPUs
        ({"cpu": "24500m", "memory": "1Gi", "nvidia.com/gpu": "1"}, False),
        ({"cpu": "1", "memory": "257Gi", "nvidia.com/gpu": "1"}, False),
        ({"cpu": "190", "memory": "1Ti", "nvidia.com/gpu": "8"}, True),
        ({"cpu": "190", "memory": "1Ti", "nvidia.com/gpu": "0"}, True),  # CPU work: not bounded here
        ({"cpu": "8", "memory": "64Gi", "nvidia.com/gpu.shared": "1"}, True),  # l40s: 64 cores / 4 GPUs / 2
        ({"cpu": "9", "memory": "8Gi", "nvidia.com/gpu.shared": "1"}, False),
        ({"cpu": "2e1", "memory": "1Gi", "nvidia.com/gpu": "1e0"}, True),
    ],
)
def test_a_gpu_pod_asks_at_most_its_gpus_share_of_a_node(requests: dict[str, str], allowed: bool) -> None:
    refused = refusals(policy(PODS), pod(requests))
    assert (not any("per GPU" in m for m in refused)) is allowed, refused
    template = {"spec": pod(requests)["spec"]}
    refused = refusals(policy(f"{TEMPLATE_POLICY}-jobs"), job(template))
    assert (not any("per GPU" in m for m in refused)) is allowed, refused


def test_the_share_counts_init_containers_as_the_scheduler_does() -> None:
    """Sidecars run beside the app containers (their requests add up), other init containers before them."""
    gpu = pod({"cpu": "20", "memory": "8Gi", "nvidia.com/gpu": "1"})
    init = {"name": "fetch", "image": "x", "resources": {"requests": {"cpu": "24"}}}
    gpu["spec"]["initContainers"] = [init]
    assert not any("per GPU" in m for m in refusals(policy(PODS), gpu))
    gpu["spec"]["initContainers"] = [{**init, "restartPolicy": "Always"}]
    assert any("per GPU" in m for m in refusals(policy(PODS), gpu))


# ---- owner references -------------------------------------------------------------------------------------

OWNED = {"apiVersion": "batch/v1", "kind": "Job", "name": "mine", "uid": "u-1", "controller": True}


def owned(*refs: dict[str, Any]) -> dict[str, Any]:
    obj = pod({"cpu": "1", "nvidia.com/gpu": "8"})
    obj["metadata"]["ownerReferences"] = list(refs)
    return obj


@pytest.mark.parametrize(
    ("user", "allowed"),
    [(MEMBER, False), ("system:serviceaccount:vision:default", False), ("system:serviceaccount:nlp:runner", False),
     ("system:anonymous", False), (JOB_CONTROLLER, True), (KUEUE_USER, True),
     ("system:serviceaccount:ray-system:kuberay-operator", True)],
)  # fmt: skip
def test_only_the_clusters_controllers_set_a_controller_owner_reference(user: str, allowed: bool) -> None:
    assert (refusals(policy(OWNERS), owned(OWNED), user=user) == []) is allowed


def test_a_member_keeps_owner_references_but_adds_or_promotes_none() -> None:
    plain = {**OWNED, "controller": False}
    assert refusals(policy(OWNERS), owned(plain)) == []  # not a controller: Kueue does not follow it
    assert refusals(policy(OWNERS), owned(OWNED), owned(OWNED), operation="UPDATE") == []
    assert refusals(policy(OWNERS), owned(OWNED), owned(plain), operation="UPDATE") != []
    assert refusals(policy(OWNERS), owned(), owned(OWNED), operation="UPDATE") == []  # released


# ---- only Kueue starts or resizes a job ---------------------------------------------------------------------


def batch(suspend: bool, parallelism: int = 1, **annotations: str) -> dict[str, Any]:
    obj = job({"spec": pod({"cpu": "1", "nvidia.com/gpu": "1"})["spec"]}, suspend=suspend)
    obj["spec"] |= {"parallelism": parallelism, "completions": parallelism}
    obj["metadata"]["annotations"] = annotations
    return obj


@pytest.mark.parametrize(
    ("old", "new", "user", "allowed"),
    [
        (batch(True), batch(False), MEMBER, False),
        (batch(True), batch(False), KUEUE_USER, True),
        (batch(False), batch(True), MEMBER, True),  # a member may suspend
        (batch(False), batch(False, 3), MEMBER, False),
        (batch(True), batch(True, 3), MEMBER, True),  # resized while suspended: Kueue admits the new size
        (batch(False), batch(False, 3), KUEUE_USER, True),
    ],
)
def test_only_kueue_starts_or_resizes_a_job(old: dict, new: dict, user: str, allowed: bool) -> None:
    assert (refusals(policy(f"{JOB_START}-jobs"), new, old, operation="UPDATE", user=user) == []) is allowed


def test_an_elastic_job_grows_behind_kueues_gate() -> None:
    elastic = {"kueue.x-k8s.io/elastic-job": "true"}
    old, new = batch(False, 1, **elastic), batch(False, 3, **elastic)
    assert (
        refusals(policy(f"{JOB_START}-jobs"), new, old, operation="UPDATE") != []
    )  # no gate in the template
    for obj in (old, new):
        obj["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/elastic-job"}]
    assert refusals(policy(f"{JOB_START}-jobs"), new, old, operation="UPDATE") == []


def pytorchjob(suspend: bool, workers: int) -> dict[str, Any]:
    template = {"spec": pod({"cpu": "1", "nvidia.com/gpu": "1"})["spec"]}
    specs = {
        "Master": {"replicas": 1, "template": template},
        "Worker": {"replicas": workers, "template": template},
    }
    return {
        "metadata": {"name": "pt"},
        "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": specs},
    }


def raycluster(suspend: bool, replicas: int) -> dict[str, Any]:
    template = {"spec": pod({"cpu": "1", "nvidia.com/gpu": "1"})["spec"]}
    worker = {
        "groupName": "gpu",
        "replicas": replicas,
        "minReplicas": 0,
        "maxReplicas": 4,
        "template": template,
    }
    return {"metadata": {"name": "rc"}, "spec": {"suspend": suspend, "headGroupSpec": {"template": template},
                                                 "workerGroupSpecs": [worker]}}  # fmt: skip


@pytest.mark.parametrize(
    ("resource", "make"),
    [("pytorchjobs", pytorchjob), ("rayclusters", raycluster)],
    ids=["pytorchjob", "raycluster"],
)
def test_framework_jobs_start_and_grow_only_through_kueue(resource: str, make: Any) -> None:
    start = policy(f"{JOB_START}-{resource}")
    assert refusals(start, make(False, 2), make(True, 2), operation="UPDATE") != []
    assert refusals(start, make(False, 2), make(True, 2), operation="UPDATE", user=KUEUE_USER) == []
    assert refusals(start, make(False, 3), make(False, 2), operation="UPDATE") != []
    assert refusals(start, make(True, 3), make(True, 2), operation="UPDATE") == []


# ---- termination grace ----------------------------------------------------------------------------------------


def test_gpu_pods_let_go_of_their_gpus_within_the_grace_cap() -> None:
    assert any("terminationGracePeriodSeconds" in m for m in refusals(
        policy(PODS), pod({"cpu": "1", "nvidia.com/gpu": "1"}, terminationGracePeriodSeconds=3600)))  # fmt: skip
    assert refusals(policy(PODS), pod({"cpu": "1"}, "cpu", terminationGracePeriodSeconds=3600)) == []
    gpu = pod({"cpu": "1", "nvidia.com/gpu": "1"})
    long, short = {"gracePeriodSeconds": 3600}, {"gracePeriodSeconds": 30}
    assert refusals(policy(GRACE), None, gpu, operation="DELETE", options=long) != []
    assert refusals(policy(GRACE), None, gpu, operation="DELETE", options=short) == []
    assert refusals(policy(GRACE), None, gpu, operation="DELETE", options=long, user=JOB_CONTROLLER) == []
    longer = replace(METAL, max_termination_grace_period="2h")
    assert (
        refusals(policy(GRACE, compile(longer, METAL_POOLS)), None, gpu, operation="DELETE", options=long)
        == []
    )


# ---- disruption budgets and priority classes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "allowed"),
    [({"maxUnavailable": 0}, False), ({"maxUnavailable": "00%"}, False), ({"maxUnavailable": "0%"}, False),
     ({"minAvailable": "100%"}, False), ({"minAvailable": "0100%"}, False), ({"maxUnavailable": "10%"}, True),
     ({"minAvailable": "10%"}, True), ({"minAvailable": 1}, True), ({"maxUnavailable": 1}, True)],
)  # fmt: skip
def test_disruption_budgets_are_read_as_numbers(budget: dict[str, Any], allowed: bool) -> None:
    assert (refusals(policy(DISRUPTION_BUDGETS), {"spec": budget}) == []) is allowed


def test_pods_name_only_the_priority_classes_the_platform_allows() -> None:
    for klass in ("high-priority", "system-node-critical"):
        refused = refusals(policy(PODS), pod({"cpu": "1"}, "cpu", priorityClassName=klass))
        assert any("podPriorityClasses: none" in m for m in refused), refused
    allowing = compile(replace(METAL, pod_priority_classes=("batch-low",)), METAL_POOLS)
    assert refusals(policy(PODS, allowing), pod({"cpu": "1"}, "cpu", priorityClassName="batch-low")) == []
    template = {"spec": pod({"cpu": "1"}, priorityClassName="high-priority")["spec"]}
    assert any("PriorityClasses" in m for m in refusals(policy(f"{TEMPLATE_POLICY}-jobs"), job(template)))


# ---- kinds ---------------------------------------------------------------------------------------------------


def test_kinds_kueue_does_not_queue_as_one_job_are_refused() -> None:
    refused = policy(REFUSED_KINDS)
    matched = {r for rule in refused["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert {
        "tfjobs",
        "xgboostjobs",
        "rayservices",
        "sparkapplications",
        "daemonsets",
        "replicasets",
    } <= matched
    assert not matched & {"jobs", "pytorchjobs", "jobsets", "rayclusters", "deployments", "cronjobs", "pods"}
    assert refusals(refused, {"metadata": {"name": "x"}}) != []
    deployment_controller = "system:serviceaccount:kube-system:deployment-controller"
    assert refusals(refused, {"metadata": {"name": "x"}}, user=deployment_controller) == []


def test_a_cronjobs_template_is_checked_and_routed_by_its_job_template() -> None:
    spec = pod({"cpu": "1"})["spec"]
    spec["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    cron = {"metadata": {"name": "c"}, "spec": {"jobTemplate": {"metadata": {"labels": {
        "kueue.x-k8s.io/queue-name": "cpu"}}, "spec": {"template": {"spec": spec}}}}}  # fmt: skip
    assert any("NVIDIA_VISIBLE_DEVICES" in m for m in refusals(policy(f"{TEMPLATE_POLICY}-cronjobs"), cron))
    spec["containers"][0].pop("env")
    assert refusals(policy(f"{TEMPLATE_POLICY}-cronjobs"), cron) == []
    cron["spec"]["jobTemplate"].pop("metadata")
    assert any("'cpu' queue" in m for m in refusals(policy(f"{TEMPLATE_POLICY}-cronjobs"), cron))


@pytest.mark.parametrize("example", DOC_WORKLOADS, ids=lambda e: f"{e['kind']}-{e['metadata']['name']}")
def test_the_docs_workloads_pass_every_template_rule(example: dict[str, Any]) -> None:
    """docs/scheduling.md's jobs (the per-GPU share and the grace cap included) against the prod stack's rules."""
    resource = {"Job": "jobs", "PyTorchJob": "pytorchjobs", "RayJob": "rayjobs"}[example["kind"]]
    rules = policy(f"{TEMPLATE_POLICY}-{resource}", compile(PROD, PROD_POOLS))
    assert refusals(rules, example, namespace=example["metadata"]["namespace"]) == []
