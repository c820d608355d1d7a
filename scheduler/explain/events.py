"""An answer as a core/v1 Event on the Workload, so `kubectl describe workload` shows it beside Kueue's own.

A team's `edit` role may create events in its namespace (Kubernetes v1.35 bootstrap policy, plugin/pkg/auth/
authorizer/rbac/bootstrappolicy/policy.go:164, `Write` on events in the core and events.k8s.io groups), so
the caller records it with their own identity.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from scheduler.explain.answer import Answer

SOURCE = "kubectl-gpufleet"


def answer_event(workload: Mapping[str, Any], answer: Answer, now: datetime | None = None) -> dict[str, Any]:
    meta = workload["metadata"]
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    message = answer.says + (f"; to start: {answer.to_start}" if answer.to_start else "")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": workload.get("apiVersion", "kueue.x-k8s.io/v1beta2"),
            "kind": "Workload",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
        },
        "reason": answer.reason.value,
        "message": message[:1024],
        "type": "Normal",
        "source": {"component": SOURCE},
        "reportingComponent": SOURCE,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
