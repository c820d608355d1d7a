"""The stack's admission policies in effect before the twin says it is up.

`pulumi up` returns once the API server has stored each ValidatingAdmissionPolicy and MutatingAdmissionPolicy
and its binding, but the API server applies them only after its policy source has seen them: it watches
policies and bindings through informers and, once a second, rebuilds its whole set from the informers' caches
when anything changed (`k8s.io/apiserver` v0.35.8, `pkg/admission/plugin/policy/generic/policy_source.go`:
`policyRefreshIntervalDefault`, `refreshPolicies`, `calculatePolicyData`). On a loaded machine that can take
seconds, and a request made in between is admitted as if the stack had no policy (three workers starting
twins at once saw a Service the stack refuses created).

So the twin adds a probe of each kind it finds deployed: a policy and binding of its own, created after the
stack's, that refuses (or labels) one dry-run ConfigMap. A watch delivers a kind's objects in resourceVersion
order and each rebuild reads both caches at once, so the set that holds the probe's policy and binding holds
every policy and binding created before them: once the probe acts, the stack's policies do too. The probe is
then deleted, leaving the cluster as the stack made it; each kind's probe acts on a ConfigMap of its own name,
since a deleted probe still acts until the next rebuild.
"""

from __future__ import annotations

import json
from typing import Any

from infra.errors import CheckFailed
from scheduler.vap import API, rule, validation
from twin.kubectl import Kubectl
from twin.processes import wait_until

PROBE = "gpufleet-twin-probe"  # with the kind's name after it: a deleted probe acts until the next rebuild
PROBE_NAMESPACE = "default"
PROBE_LABEL = "gpufleet.io/twin-probe"
REFUSED = "the twin's admission probe"  # the probe policy's message, which a refusal carries
KINDS = ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")
# kubectl's resource.version.group: the v1 objects only, whatever other versions the minor serves
GROUP = "v1.admissionregistration.k8s.io"


def resource(kind: str) -> str:
    """kubectl's fully qualified resource of a policy kind or its binding kind."""
    plural = kind.lower().removesuffix("y") + ("ies" if kind.endswith("y") else "s")
    return f"{plural}.{GROUP}"


def probe_name(kind: str) -> str:
    """The twin's probe of `kind`: its policy, binding and ConfigMap."""
    return f"{PROBE}-{kind.removesuffix('AdmissionPolicy').lower()}"


def probe_object(name: str) -> dict[str, Any]:
    """The ConfigMap a probe acts on, created only as a dry run."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": PROBE_NAMESPACE}}


def probe_policy(kind: str, name: str) -> list[dict[str, Any]]:
    """A policy of `kind` named `name` and its binding that act on the ConfigMap `name` only: a validating one
    refuses it, a mutating one labels it."""
    match = {
        "matchConstraints": {"resourceRules": [rule("", ["configmaps"], ["CREATE"])]},
        "matchConditions": [{"name": "probe", "expression": f"object.metadata.name == '{name}'"}],
        "failurePolicy": "Fail",
    }
    if kind == "ValidatingAdmissionPolicy":
        spec = {**match, "validations": [validation("false", REFUSED)]}
        binding_spec: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    else:
        labels = f'{{"{PROBE_LABEL}": "applied"}}'
        apply = f"Object{{metadata: Object.metadata{{labels: {labels}}}}}"
        spec = {
            **match,
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": apply}}],
        }
        binding_spec = {"policyName": name}
    meta = {"name": name, "labels": {PROBE_LABEL: "true"}}
    return [
        {"apiVersion": API, "kind": kind, "metadata": meta, "spec": spec},
        {"apiVersion": API, "kind": f"{kind}Binding", "metadata": meta, "spec": binding_spec},
    ]


def deployed_kinds(kubectl: Kubectl) -> list[str]:
    """The policy kinds the cluster serves and holds at least one policy of (a minor that does not serve a kind
    answers with an error, and holds none)."""
    found = []
    for kind in KINDS:
        got = kubectl.attempt("get", resource(kind), "-o", "name")
        if got.ok and got.out.strip():
            found.append(kind)
    return found


def await_policies(kubectl: Kubectl, timeout: float = 60) -> list[str]:
    """Wait until every admission policy deployed so far is in effect (see the module's docstring); the kinds
    waited for."""
    kinds = deployed_kinds(kubectl)
    for kind in kinds:
        name = probe_name(kind)
        kubectl.apply(probe_policy(kind, name))
        try:
            wait_until(
                lambda: probe_acts(kubectl, kind, name),  # noqa: B023 (called only within this pass of the loop)
                f"the API server to apply the stack's {kind} objects (a probe policy created after them acting)",
                None,
                timeout,
            )
        finally:
            for probe_kind in (f"{kind}Binding", kind):
                kubectl.attempt("delete", resource(probe_kind), name, "--ignore-not-found")
    return kinds


def probe_acts(kubectl: Kubectl, kind: str, name: str) -> bool:
    """Whether the probe policy of `kind` named `name` acts on a dry-run create of its ConfigMap."""
    body = json.dumps(probe_object(name))
    got = kubectl.attempt("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=body)
    if kind == "ValidatingAdmissionPolicy":
        return not got.ok and REFUSED in got.err
    if not got.ok:
        raise CheckFailed(f"a dry-run create of the probe ConfigMap {name} failed: {got.err.strip()}")
    labels = json.loads(got.out).get("metadata", {}).get("labels") or {}
    return labels.get(PROBE_LABEL) == "applied"
