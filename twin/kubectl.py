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
from twin import api_reads

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
        """Run kubectl with `args`; its status and output, whether it succeeded or not. A plain read that
        succeeds is answered without a kubectl process (`twin.api_reads`), as kubectl would print it."""
        if (
            stdin is None
            and (out := api_reads.read(self.kubeconfig, args, self.user, self.groups)) is not None
        ):
            return Result(0, out, "")
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
            self.established([str(o["metadata"]["name"]) for o in crds])
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
        names = [n.split("/", 1)[1] for n in out.split() if n.startswith("customresourcedefinition")]
        if names:
            self.established(names)

    def established(self, names: Sequence[str], timeout: float = 60) -> None:
        """Wait until every named CRD has the condition Established=True. Polled rather than `kubectl wait
        --for=condition=Established`, which fails at once on a CRD the API server has not given conditions yet
        (`.status.conditions accessor error: <nil>`) instead of waiting for them."""
        deadline = time.monotonic() + timeout
        waiting, said = set(names), ""
        while waiting:
            got = self.attempt("get", "crd", *sorted(waiting), "-o", "json", "--ignore-not-found")
            if got.ok and got.out.strip():
                doc = json.loads(got.out)  # one name gives the object, several a List
                for crd in doc.get("items", [doc] if doc.get("kind") == "CustomResourceDefinition" else []):
                    conditions = crd.get("status", {}).get("conditions") or []
                    if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                        waiting.discard(crd["metadata"]["name"])
            said = got.err.strip() or said
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise CheckFailed(
                    f"CRDs not Established after {timeout:.0f} s: {', '.join(sorted(waiting))}"
                    + (f" (kubectl: {said})" if said else "")
                )
            time.sleep(0.2)

    def get(self, kind: str, name: str = "", namespace: str = "") -> dict[str, Any]:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        return dict(json.loads(self.run(*args)))

    def token(self, service_account: str, namespace: str, hours: int = 48) -> str:
        """A TokenRequest token of a ServiceAccount (`kubectl create token`)."""
        return self.run("create", "token", service_account, "-n", namespace, f"--duration={hours}h").strip()
