"""Talking to a twin from a test: kubectl of the twin's minor, as the admin or as a team member.

A team member is impersonated (`--as`, `--as-group`): the API server authorizes the request as that user with
that group, exactly as it would a real member's (kubernetes.io "User impersonation"), so RBAC, the admission
policies and Kueue's webhooks all see them.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.launch import RunningTwin


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


@dataclass
class Kube:
    kubectl: Path
    kubeconfig: Path
    twin: RunningTwin | None = None
    user: str = ""
    groups: tuple[str, ...] = ()

    @classmethod
    def of(cls, twin: RunningTwin) -> Kube:
        return cls(Path(twin.info["kubectl"]), twin.kubeconfig, twin)

    def as_member(self, groups: tuple[str, ...], user: str = "alice@example.com") -> Kube:
        return Kube(self.kubectl, self.kubeconfig, self.twin, user, groups)

    def run(self, *args: str, stdin: str | None = None) -> Result:
        who = [f"--as={self.user}", *(f"--as-group={g}" for g in self.groups)] if self.user else []
        argv = [str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *who, *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False)
        return Result(done.returncode, done.stdout, done.stderr)

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        assert result.ok, f"kubectl {' '.join(args)} failed: {result.err}"
        return result.out

    def create(self, obj: dict[str, Any]) -> Result:
        return self.run("create", "-f", "-", "-o", "json", stdin=json.dumps(obj))

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
        ns = ["-n", namespace] if namespace else []
        return dict(json.loads(self.ok("get", kind, name, *ns, "-o", "json")))

    def items(self, kind: str, namespace: str = "", selector: str = "") -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json", *(["-n", namespace] if namespace else ["-A"])]
        if selector:
            args += ["-l", selector]
        return list(json.loads(self.ok(*args))["items"])

    def delete(self, kind: str, name: str, namespace: str) -> None:
        self.run("delete", kind, name, "-n", namespace, "--ignore-not-found", "--wait=false")


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def eventually(check: Callable[[], Any], what: str, timeout: float = 60, every: float = 0.5) -> Any:
    """Poll until `check()` returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


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
