"""Compiled objects against the real upstream schemas: Kueue CRDs (v0.19.2), GPU operator CRD, Kubernetes --strict."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from scheduler import compile, kube_scheduler_config
from scheduler.compiler import is_custom_resource
from scheduler.validation import (
    cel_problems,
    core_problems,
    crd_problems,
    kueue_rule_problems,
    load_crd_schemas,
    strict,
)
from tests.scheduler.examples import EXAMPLES, PROD, PROD_POOLS
from tests.scheduler.helpers import find

VARIANTS = {
    **EXAMPLES,
    "prod-classic-provisioning": (replace(PROD, fair_sharing=False, provisioning_requests=True), PROD_POOLS),
}


@pytest.fixture(scope="module")
def schemas(shared_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return load_crd_schemas(shared_dir / "crds")


@pytest.mark.parametrize("example", sorted(VARIANTS))
def test_every_custom_resource_matches_its_crd(example: str, schemas: dict) -> None:
    policy, pools = VARIANTS[example]
    custom = [o for o in compile(policy, pools) if is_custom_resource(o)]
    assert {o["apiVersion"] for o in custom} == {"kueue.x-k8s.io/v1beta2"}
    problems = [
        p
        for o in custom
        for p in crd_problems(o, schemas) + cel_problems(o, schemas) + kueue_rule_problems(o)
    ]
    assert problems == []


@pytest.mark.parametrize("example", sorted(VARIANTS))
def test_every_core_object_passes_kubernetes_validate_strict(example: str) -> None:
    policy, pools = VARIANTS[example]
    core = [o for o in compile(policy, pools) if not is_custom_resource(o)]
    assert core
    assert [p for o in core for p in core_problems(o, policy.kubernetes_version)] == []
    for obj in core[:3]:  # the library's own entry point agrees
        kubernetes_validate.validate(obj, policy.kubernetes_version, strict=True)


def test_the_policys_kubernetes_version_is_covered_by_kubernetes_validate() -> None:
    supported = {kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()}
    assert PROD.kubernetes_version in supported


def test_strict_crd_schema_rejects_unknown_and_mistyped_fields(schemas: dict) -> None:
    objects = compile(PROD, PROD_POOLS)
    cq = copy.deepcopy(find(objects, "ClusterQueue", "research"))
    cq["spec"]["cohort"] = "gpufleet"  # the v1beta1 name, gone in v1beta2
    cq["spec"]["admissionChecks"] = ["x"]  # removed in v1beta2
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = {"n": 1}
    cq["spec"]["preemption"]["withinClusterQueue"] = "Always"
    problems = "\n".join(crd_problems(cq, schemas))
    assert "('admissionChecks', 'cohort' were unexpected)" in problems
    assert "nominalQuota" in problems
    assert "'Always' is not one of" in problems
    flavor = copy.deepcopy(find(objects, "ResourceFlavor", "h100-train"))
    flavor["metadata"]["lables"] = {}
    assert any("'lables' was unexpected" in p for p in crd_problems(flavor, schemas))


def test_crd_cel_rules_are_evaluated(schemas: dict) -> None:
    objects = compile(PROD, PROD_POOLS)
    cq = copy.deepcopy(find(objects, "ClusterQueue", "research"))
    cq["spec"]["resourceGroups"][1]["flavors"][1]["resources"].pop()
    del cq["spec"]["cohortName"]  # research has a borrowing limit, which needs a cohort
    cq["spec"]["preemption"] = {
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "LowerPriority"},
    }
    problems = cel_problems(cq, schemas)
    assert any(
        "flavors must have the same number of resources as the coveredResources" in p for p in problems
    )
    assert any("borrowingLimit must be nil when cohort is empty" in p for p in problems)
    assert any("reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never" in p for p in problems)
    flavor = copy.deepcopy(find(objects, "ResourceFlavor", "h100-train"))
    flavor["spec"] = {"topologyName": "racks"}  # a topology needs node labels
    assert cel_problems(flavor, schemas) != []


def test_kueue_rules_catch_mismatched_resource_lists() -> None:
    cq = copy.deepcopy(find(compile(PROD, PROD_POOLS), "ClusterQueue", "llm-training"))
    cq["spec"]["resourceGroups"][1]["flavors"][0]["resources"].pop()
    own = cq["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]
    own["lendingLimit"] = own["nominalQuota"] + 1
    problems = kueue_rule_problems(cq)
    assert any("differ from coveredResources" in p for p in problems)
    assert any("lendingLimit above nominalQuota" in p for p in problems)


def test_strict_core_validation_rejects_unknown_fields() -> None:
    ns = copy.deepcopy(find(compile(PROD, PROD_POOLS), "Namespace", "team-llm"))
    ns["spec"] = {"finalizer": ["kubernetes"]}
    assert any("'finalizer' was unexpected" in p for p in core_problems(ns, "1.35"))


def test_int_or_string_and_preserve_unknown_fields_are_honoured() -> None:
    schema = strict(
        {
            "type": "object",
            "properties": {
                "q": {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+(Gi)?$"},
                "free": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"a": {}},
                },
                "closed": {"type": "object", "properties": {"a": {"type": "string"}}},
            },
        }
    )
    validator = jsonschema.Draft7Validator(schema)
    assert validator.is_valid({"q": 3, "free": {"anything": 1}, "closed": {"a": "x"}})
    assert validator.is_valid({"q": "128Gi"})
    assert not validator.is_valid({"q": "lots"})
    assert not validator.is_valid({"q": 1.5})
    assert not validator.is_valid({"closed": {"b": "x"}})
    assert not validator.is_valid({"extra": 1})


def test_kube_scheduler_configuration_shape() -> None:
    config = kube_scheduler_config(PROD, PROD_POOLS)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["profiles"][0]["schedulerName"] == "default-scheduler"
    fit = config["profiles"][0]["pluginConfig"][0]
    assert fit["name"] == "NodeResourcesFit"
    assert set(fit["args"]) == {"scoringStrategy"}
    strategy = fit["args"]["scoringStrategy"]
    assert strategy["type"] in ("MostAllocated", "LeastAllocated", "RequestedToCapacityRatio")
    assert all(set(r) == {"name", "weight"} and 1 <= r["weight"] <= 100 for r in strategy["resources"])
    names = [r["name"] for r in strategy["resources"]]
    assert {"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"} <= set(names)


# Field names of Kueue's config.kueue.x-k8s.io/v1beta2 Configuration (apis/config/v1beta2/configuration_types.go,
# v0.19) and the integration names it accepts: a misspelt key is silently ignored by the controller.
CONFIG_FIELDS = {
    "apiVersion", "kind", "namespace", "webhook", "leaderElection", "metrics", "health", "pprofBindAddress",
    "controller", "tls", "manageJobsWithoutQueueName", "managedJobsNamespaceSelector", "internalCertManagement",
    "waitForPodsReady", "clientConnection", "integrations", "multiKueue", "fairSharing", "admissionFairSharing",
    "resources", "featureGates", "objectRetentionPolicies",
}  # fmt: skip
WAIT_FOR_PODS_READY_FIELDS = {"timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
REQUEUING_FIELDS = {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}
FRAMEWORKS = {
    "batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
    "jobset.x-k8s.io/jobset", "kubeflow.org/paddlejob", "kubeflow.org/pytorchjob", "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob", "kubeflow.org/jaxjob", "trainer.kubeflow.org/trainjob",
    "workload.codeflare.dev/appwrapper", "sparkoperator.k8s.io/sparkapplication", "pod", "deployment",
    "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset",
}  # fmt: skip


@pytest.mark.parametrize("fair_sharing", [True, False])
def test_kueue_manager_configuration_uses_only_v1beta2_fields(fair_sharing: bool) -> None:
    from scheduler import manager_config

    config = manager_config(replace(PROD, fair_sharing=fair_sharing))
    assert set(config) <= CONFIG_FIELDS
    assert set(config["waitForPodsReady"]) <= WAIT_FOR_PODS_READY_FIELDS
    assert set(config["waitForPodsReady"]["requeuingStrategy"]) <= REQUEUING_FIELDS
    assert set(config["integrations"]) == {"frameworks"}
    assert set(config["integrations"]["frameworks"]) <= FRAMEWORKS
    assert set(config.get("fairSharing", {})) <= {"preemptionStrategies"}
