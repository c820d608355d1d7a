"""Team-namespace admission policies: which namespaces they match (the platform's never), on which minors the
mutating ones exist, and that they validate against the core schemas.

What they allow and refuse is decided by the real API server: tests/twin/test_admission_rules.py and
tests/twin/test_team_rules.py act on the twin as team members.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler import compile, tenancy
from scheduler.admission import DEFAULT_PRIORITY, DEFAULT_SCHEDULER, PODS, SERVICES
from scheduler.queue_routing import ROUTE_QUEUE
from tests.scheduler.examples import METAL, METAL_POOLS, PROD, PROD_POOLS
from tests.scheduler.helpers import find, of_kind, selector_matches

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def test_policies_match_team_namespaces_only_and_external_services_per_team() -> None:
    teams = tuple(replace(t, external_services=t.name == "inference") for t in PROD.teams)
    objects = compile(replace(PROD, teams=teams), PROD_POOLS)
    pods = find(objects, "ValidatingAdmissionPolicy", PODS)["spec"]["matchConstraints"]["namespaceSelector"]
    services = find(objects, "ValidatingAdmissionPolicy", SERVICES)["spec"]["matchConstraints"][
        "namespaceSelector"
    ]
    for ns in of_kind(objects, "Namespace"):
        labels = {**ns["metadata"]["labels"], "kubernetes.io/metadata.name": ns["metadata"]["name"]}
        assert selector_matches(pods, labels) and selector_matches(services, labels)
        # allowExternalServices is the namespace's label, read by the policy's expression (namespaceObject)
        external = ns["metadata"]["labels"].get(tenancy.EXTERNAL_SERVICES_LABEL) == "allowed"
        assert external is (ns["metadata"]["name"] == "team-inference")
    for platform in ("kube-system", "kueue-system", "gpu-operator", "monitoring", "ingress"):
        labels = {"kubernetes.io/metadata.name": platform}
        assert not selector_matches(pods, labels) and not selector_matches(services, labels)
    for binding in of_kind(objects, "ValidatingAdmissionPolicyBinding"):
        assert binding["spec"]["validationActions"] == ["Deny"]


def test_mutating_policies_only_where_the_api_is_served() -> None:
    """MutatingAdmissionPolicy is admissionregistration.k8s.io/v1 (GA, on by default) from Kubernetes 1.36;
    in 1.34-1.35 it is v1beta1 behind a feature gate and a runtime-config flag (Kubernetes docs, "Mutating
    Admission Policy"; the 1.35 and 1.36 OpenAPI schemas of kubernetes-validate)."""
    assert not of_kind(compile(METAL, METAL_POOLS), "MutatingAdmissionPolicy")
    objects = compile(
        replace(METAL, kubernetes_version="1.36", kube_scheduler_image_tag="v1.36.4"), METAL_POOLS
    )
    routing = {p for p in names(objects, "MutatingAdmissionPolicy") if p.startswith(ROUTE_QUEUE)}
    assert names(objects, "MutatingAdmissionPolicy") - routing == {DEFAULT_PRIORITY, DEFAULT_SCHEDULER}
    assert f"{ROUTE_QUEUE}-jobs" in routing and f"{ROUTE_QUEUE}-pods" in routing
    aws = compile(replace(PROD, kubernetes_version="1.36", kube_scheduler_image_tag="v1.36.4"), PROD_POOLS)
    assert names(aws, "MutatingAdmissionPolicy") - routing == {DEFAULT_PRIORITY}


def names(objects: list[dict], kind: str) -> set[str]:
    return {p["metadata"]["name"] for p in of_kind(objects, kind)}


def test_mutating_policies_validate_against_the_1_36_core_schemas() -> None:
    from scheduler.validation import core_problems

    policy = replace(METAL, kubernetes_version="1.36", kube_scheduler_image_tag="v1.36.4")
    objects = [o for o in compile(policy, METAL_POOLS) if "AdmissionPolicy" in o["kind"]]
    assert [p for o in objects for p in core_problems(o, "1.36")] == []
