"""Builders for admission policy objects (admissionregistration.k8s.io/v1): a policy and its binding, rules,
validations. Shared by the modules that hold the team rules, so each holds only its CEL."""

from __future__ import annotations

from typing import Any

from scheduler.kueue_config import QUEUE_MANAGED_LABEL
from scheduler.labels import metadata

API = "admissionregistration.k8s.io/v1"
MUTATING_ADMISSION_POLICY_SINCE = (1, 36)  # admissionregistration.k8s.io/v1, on by default
TEAM_NAMESPACES = {"matchExpressions": [{"key": QUEUE_MANAGED_LABEL, "operator": "In", "values": ["true"]}]}


def rule(group: str, resources: list[str], operations: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "apiVersions": ["*"], "operations": operations, "resources": resources}


def validation(expression: str, message: str) -> dict[str, Any]:
    return {"expression": expression, "message": message, "reason": "Forbidden"}


def validating(
    name: str,
    rules: list[dict[str, Any]],
    selector: dict[str, Any],
    validations: list[dict[str, Any]],
    variables: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (failurePolicy Fail) and its Deny binding; `variables` (name -> CEL) are
    evaluated once per request and read as `variables.<name>`."""
    policy: dict[str, Any] = {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(name),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"namespaceSelector": selector, "resourceRules": rules},
            "validations": validations,
        },
    }
    if variables:
        policy["spec"]["variables"] = [{"name": k, "expression": v} for k, v in variables.items()]
    binding = {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata(name),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def supports_mutating_policies(kubernetes_version: str) -> bool:
    """MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1, served by default) from 1.36 on."""
    major, minor = (int(x) for x in kubernetes_version.split(".")[:2])
    return (major, minor) >= MUTATING_ADMISSION_POLICY_SINCE


def mutating(name: str, rules: list[dict[str, Any]], condition: str, apply: str) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy in team namespaces (one ApplyConfiguration mutation) and its binding."""
    policy = {
        "apiVersion": API,
        "kind": "MutatingAdmissionPolicy",
        "metadata": metadata(name),
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"namespaceSelector": TEAM_NAMESPACES, "resourceRules": rules},
            "matchConditions": [{"name": "not-set", "expression": condition}],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": apply}}],
        },
    }
    binding = {
        "apiVersion": API,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": metadata(name),
        "spec": {"policyName": name},
    }
    return [policy, binding]
