"""kubectl of the twin's own minor: the twin's bulk work (apply what a chart or a stack renders, wait) and the
requests the tests make of a twin, as its admin or as a team member.

Objects are applied server-side (`kubectl apply --server-side`) under one field manager, so reapplying is a
no-op and nothing the stack's own deploy owns is taken over; CRDs are applied and waited for (Established)
before the objects they serve.

A team member is impersonated (`user`, `groups`: `--as`, `--as-group`): the API server authorizes the request
as that user with that group, exactly as it would a real member's (kubernetes.io "User impersonation"), so
RBAC, the admission policies and Kueue's webhooks all see them.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.errors import CheckFailed

FIELD_MANAGER = "gpufleet-twin"


@dataclass(frozen=True)
class Result:
    """One kubectl command's exit status and output."""

    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


@dataclass(frozen=True)
class Kubectl:
    binary: Path
    kubeconfig: Path
    user: str = ""  # impersonated (`--as`) when set, with `groups` (`--as-group`)
    groups: tuple[str, ...] = ()

    def attempt(self, *args: str, stdin: str | None = None, timeout: float = 120) -> Result:
        """Run kubectl with `args`; its status and output, whether it succeeded or not."""
        who = [f"--as={self.user}", *(f"--as-group={g}" for g in self.groups)] if self.user else []
        argv = [str(self.binary), f"--kubeconfig={self.kubeconfig}", *who, *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=timeout)
        return Result(done.returncode, done.stdout, done.stderr)

    def run(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120) -> str:
        """kubectl's output; with `check`, CheckFailed when it fails."""
        done = self.attempt(*args, stdin=stdin, timeout=timeout)
        if check and not done.ok:
            raise CheckFailed(f"kubectl {' '.join(args[:3])} failed: {(done.err or done.out).strip()}")
        return done.out

    def apply(self, objects: Sequence[dict[str, Any]], *extra: str) -> str:
        if not objects:
            return ""
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        return self.run("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
                        *extra, "-f", "-", stdin=doc)  # fmt: skip

    def apply_crds_first(self, objects: Iterable[dict[str, Any]]) -> None:
        """CRDs, waited for until Established, then everything else."""
        items = list(objects)
        crds = [o for o in items if o["kind"] == "CustomResourceDefinition"]
        self.apply(crds)
        if crds:
            self.wait_established([f"crd/{o['metadata']['name']}" for o in crds])
        self.apply([o for o in items if o["kind"] != "CustomResourceDefinition"])

    def apply_crd_files(self, paths: Iterable[Path]) -> None:
        """CRD files as they are (kubectl parses them: some upstream CRDs use YAML that PyYAML's safe loader
        refuses, such as a bare `=` enum value), waited for until Established."""
        files = sorted(paths)
        if not files:
            return
        args = [a for f in files for a in ("-f", str(f))]
        out = self.run("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
                       *args, "-o", "name")  # fmt: skip
        names = [n for n in out.split() if n.startswith("customresourcedefinition")]
        if names:
            self.wait_established(names)

    def wait_established(self, names: Sequence[str], tries: int = 5) -> None:
        """Wait for CRDs to be Established. kubectl's condition wait gives up at once, instead of waiting, on a
        CRD whose status has no conditions yet (".status.conditions accessor error: <nil>"), which a CRD just
        created can show while the API server's controller has not written them: asked again, it waits."""
        for attempt in range(tries):
            done = self.attempt("wait", "--for=condition=Established", "--timeout=60s", *names)
            if done.ok:
                return
            if "accessor error" not in done.err or attempt == tries - 1:
                raise CheckFailed(f"kubectl wait --for=condition=Established failed: {done.err.strip()}")
            time.sleep(1)

    def get(self, kind: str, name: str = "", namespace: str = "") -> dict[str, Any]:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        return dict(json.loads(self.run(*args)))

    def token(self, service_account: str, namespace: str, hours: int = 48) -> str:
        """A TokenRequest token of a ServiceAccount (`kubectl create token`)."""
        return self.run("create", "token", service_account, "-n", namespace, f"--duration={hours}h").strip()
