"""A cluster-wide guard: GPU pods may only be created where Kueue gates them (or by the GPU stack itself).

Team namespaces are covered by Kueue (`manageJobsWithoutQueueName`, see kueue_config); this
ValidatingAdmissionPolicy closes the other door, a pod requesting `nvidia.com/*` resources in any other
namespace (`default`, a tool's namespace) that tolerates the GPU taint and so bypasses every quota. The GPU
operator's own validator pods request a GPU, so its namespace (and kube-system) stay allowed.

The policy matches every namespace whose `gpufleet.io/queue-managed` label is anything but exactly `true`
(absent, `false`, `yes`...), the exact complement of Kueue's `managedJobsNamespaceSelector`, so no label value
puts a namespace outside both.
"""

from __future__ import annotations

from typing import Any

from scheduler.kueue_config import QUEUE_MANAGED_LABEL
from scheduler.labels import GPU_OPERATOR_NAMESPACE
from scheduler.podcel import no_gpu_request
from scheduler.vap import validating, validation

NAME = "gpufleet-gpu-pods-through-kueue"
ALLOWED_NAMESPACES = ("kube-system", GPU_OPERATOR_NAMESPACE)


EXPRESSION = no_gpu_request("object")  # a zero quantity is no request, as in the team rules


def gpu_guard() -> list[dict[str, Any]]:
    outside = {
        "matchExpressions": [
            {"key": QUEUE_MANAGED_LABEL, "operator": "NotIn", "values": ["true"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(ALLOWED_NAMESPACES)},
        ]
    }
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    message = "GPU pods must run in a team namespace, where they go through the team's Kueue queue"
    return validating(NAME, rules, outside, [validation(EXPRESSION, message)])
