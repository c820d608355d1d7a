"""Running training pods are never voluntarily disrupted: the platform marks them `karpenter.sh/do-not-disrupt`.

Karpenter leaves a node alone for consolidation and drift while a pod on it carries
`karpenter.sh/do-not-disrupt: "true"` (Karpenter docs, concepts/disruption, "Pod-Level Controls"). Users
should not have to remember it, so a MutatingAdmissionPolicy adds it to every pod that Kueue admitted to a
training pool's flavor: Kueue writes the flavor's node labels (`gpufleet.io/pool`) into the pod's
`nodeSelector` when it admits the workload (on create for jobs, on the ungating update for plain pods).

MutatingAdmissionPolicy is GA (`admissionregistration.k8s.io/v1`, served by default) from Kubernetes 1.36
(KEP-3962); before that it is a beta API that is off by default. A spec rule therefore asks for 1.36 when a
Karpenter training pool exists.
"""

from __future__ import annotations

from typing import Any

from infra.pools import karpenter_pools, workload
from infra.spec import ClusterSpec
from scheduler.labels import POOL_LABEL, metadata

API = "admissionregistration.k8s.io/v1"
NAME = "gpufleet-training-do-not-disrupt"
ANNOTATION = "karpenter.sh/do-not-disrupt"
MIN_KUBERNETES = "1.36"


def training_pools(spec: ClusterSpec) -> list[str]:
    return [p.name for p in karpenter_pools(spec) if workload(p) == "training"]


def match_expression(pools: list[str]) -> str:
    """CEL: the pod is bound for one of these pools (by the node selector Kueue set from the flavor)."""
    names = ", ".join(f"'{p}'" for p in pools)
    return (
        f"has(object.spec.nodeSelector) && '{POOL_LABEL}' in object.spec.nodeSelector && "
        f"object.spec.nodeSelector['{POOL_LABEL}'] in [{names}]"
    )


MUTATION = f'Object{{metadata: Object.metadata{{annotations: {{"{ANNOTATION}": "true"}}}}}}'


def do_not_disrupt_policy(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The policy and its binding, or nothing when no Karpenter pool runs training."""
    pools = training_pools(spec)
    if not pools:
        return []
    policy = {
        "apiVersion": API,
        "kind": "MutatingAdmissionPolicy",
        "metadata": metadata(NAME),
        "spec": {
            # A failing mutation must not let a training pod through unprotected.
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [{"name": "training-pool", "expression": match_expression(pools)}],
            "mutations": [
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": MUTATION}}
            ],
        },
    }
    binding = {
        "apiVersion": API,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": metadata(NAME),
        "spec": {"policyName": NAME},
    }
    return [policy, binding]
