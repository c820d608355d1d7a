"""Talking to a twin from a test: the twin's own kubectl client (`twin.kubectl.Kubectl`, which also
impersonates a team member) with a test's conveniences, and builders for the objects the tests create.

`Kube.attempt` returns a command's status and output, for asserting a refusal; `Kube.ok` asserts success and
returns the output; `Kube.get` (the client's) fails the test when the object is missing.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from twin.kubectl import Kubectl, Result
from twin.launch import RunningTwin


@dataclass(frozen=True)
class Kube(Kubectl):
    """The twin's kubectl, held with the running twin it talks to."""

    twin: RunningTwin | None = None

    @classmethod
    def of(cls, twin: RunningTwin) -> Kube:
        return cls(Path(twin.info["kubectl"]), twin.kubeconfig, twin=twin)

    def as_member(self, groups: tuple[str, ...], user: str = "alice@example.com") -> Kube:
        return replace(self, user=user, groups=groups)

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.attempt(*args, stdin=stdin)
        assert result.ok, f"kubectl {' '.join(args)} failed: {result.err}"
        return result.out

    def create(self, obj: dict[str, Any]) -> Result:
        return self.attempt("create", "-f", "-", "-o", "json", stdin=json.dumps(obj))

    def items(self, kind: str, namespace: str = "", selector: str = "") -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json", *(["-n", namespace] if namespace else ["-A"])]
        if selector:
            args += ["-l", selector]
        return list(json.loads(self.ok(*args))["items"])

    def delete(self, kind: str, name: str, namespace: str) -> None:
        self.attempt("delete", kind, name, "-n", namespace, "--ignore-not-found", "--wait=false")


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def job(
    name_: str,
    namespace: str,
    requests: dict[str, Any],
    *,
    queue: str | None = None,
    pod: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    parallelism: int = 1,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job with one container requesting `requests` (limits the same)."""
    container = {
        "name": "main",
        "image": "registry.example/train:1",
        "resources": {"requests": requests, "limits": requests},
    }
    spec = {"restartPolicy": "Never", "containers": [container], **(pod or {})}
    meta_labels = dict(labels or {})
    if queue:
        meta_labels["kueue.x-k8s.io/queue-name"] = queue
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name_, "namespace": namespace, "labels": meta_labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"metadata": {"annotations": dict(annotations or {})}, "spec": spec},
        },
    }


def pod(name_: str, namespace: str, requests: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "registry.example/app:1",
        "resources": {"requests": requests, "limits": requests},
    }
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name_, "namespace": namespace, **spec.pop("metadata", {})},
        "spec": {"containers": [container], **spec},
    }
