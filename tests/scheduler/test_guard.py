"""The GPU-pod guard: its CEL expression, evaluated with cel-python, denies exactly the GPU-requesting pods."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import compile
from scheduler.guard import ALLOWED_NAMESPACES, EXPRESSION, NAME
from scheduler.kueue_config import QUEUE_MANAGED_LABEL
from tests.scheduler.cel import holds
from tests.scheduler.examples import PROD, PROD_POOLS
from tests.scheduler.helpers import find, selector_matches


def allowed(pod_spec: dict[str, Any]) -> bool:
    return holds(EXPRESSION, object={"spec": pod_spec})


def container(**resources: dict[str, str]) -> dict[str, Any]:
    return {"name": "c", "image": "busybox", **({"resources": resources} if resources else {})}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [container()]}, True),
        ({"containers": [container(requests={"cpu": "1", "memory": "1Gi"})]}, True),
        ({"containers": [container(requests={"nvidia.com/gpu": "1"})]}, False),
        ({"containers": [container(limits={"nvidia.com/gpu": "1"})]}, False),  # limits alone imply requests
        ({"containers": [container(), container(limits={"nvidia.com/gpu.shared": "1"})]}, False),
        (
            {
                "containers": [container()],
                "initContainers": [container(requests={"nvidia.com/mig-1g.10gb": "1"})],
            },
            False,
        ),
        ({"containers": [container(limits={"example.com/fpga": "1"})]}, True),
        ({"containers": [container(requests={"nvidia.com/gpu": "0"})]}, True),  # zero is no request
        ({"containers": [container(limits={"nvidia.com/gpu": "1e0"})]}, False),
        # a DRA claim is a GPU share (scheduler.dra): outside a team namespace it would skip every quota
        (
            {
                "containers": [container()],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
            },
            False,
        ),
        ({"containers": [container()], "resourceClaims": []}, True),
    ],
)
def test_expression_denies_pods_that_request_gpus(spec: dict[str, Any], expected: bool) -> None:
    assert allowed(spec) is expected


def test_policy_applies_outside_team_namespaces_and_is_bound_to_deny() -> None:
    objects = compile(PROD, PROD_POOLS)
    policy = find(objects, "ValidatingAdmissionPolicy", NAME)
    selector = policy["spec"]["matchConstraints"]["namespaceSelector"]
    for exempt in ALLOWED_NAMESPACES:
        assert not selector_matches(selector, {"kubernetes.io/metadata.name": exempt})
    team_ns = find(objects, "Namespace", "team-llm")["metadata"]["labels"]
    assert QUEUE_MANAGED_LABEL in team_ns  # team namespaces are exempt: Kueue gates their pods instead
    binding = find(objects, "ValidatingAdmissionPolicyBinding", NAME)
    assert binding["spec"] == {"policyName": NAME, "validationActions": ["Deny"]}


@pytest.mark.parametrize("value", [None, "true", "false", "True", "yes", ""])
def test_every_namespace_is_gated_by_kueue_or_guarded_never_neither_nor_both(value: str | None) -> None:
    """Kueue manages jobs in namespaces matching `managedJobsNamespaceSelector` (Kueue v0.19.2
    apis/config/v1beta2 Configuration); the guard must match exactly the others, whatever the label's value
    (the selector semantics are apimachinery's, see `selector_matches`)."""
    from scheduler.kueue_config import manager_config

    objects = compile(PROD, PROD_POOLS)
    guard = find(objects, "ValidatingAdmissionPolicy", NAME)["spec"]["matchConstraints"]["namespaceSelector"]
    kueue = manager_config(PROD)["managedJobsNamespaceSelector"]
    labels = {"kubernetes.io/metadata.name": "some-tool"}
    if value is not None:
        labels[QUEUE_MANAGED_LABEL] = value
    assert selector_matches(guard, labels) != selector_matches(kueue, labels)
