"""The one reader: kubectl with the caller's own kubeconfig and flags (`--kubeconfig`, `--context`, `--as`,
`--as-group`), so every answer is what the caller's RBAC lets them see, and nothing more.

kubectl rather than a client library because a kubectl plugin runs where kubectl runs, with its exec
credential plugins (`aws eks get-token`, OIDC login) already working.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any


class ClusterError(Exception):
    """A read that failed: the message names what and why; `exit_code` is 2 for bad input, 3 for a cluster that
    cannot be read."""

    def __init__(self, message: str, exit_code: int = 3) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _said(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and not re.match(r"^[IWEF]\d{4} ", line)]
    return lines[-1].strip() if lines else "no message"


@dataclass(frozen=True)
class Kubectl:
    binary: str = "kubectl"
    flags: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, binary: str = "kubectl", kubeconfig: str = "", context: str = "", user: str = "",
        groups: tuple[str, ...] = (),
    ) -> Kubectl:  # fmt: skip
        """kubectl with the global flags given (impersonation needs a user: `kubectl-gpufleet` when only groups
        are given)."""
        flags = [f"--kubeconfig={kubeconfig}"] if kubeconfig else []
        flags += [f"--context={context}"] if context else []
        if user or groups:
            flags.append(f"--as={user or 'kubectl-gpufleet'}")
        flags += [f"--as-group={g}" for g in groups]
        return cls(binary, tuple(flags))

    def _run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        exe = shutil.which(self.binary) or self.binary
        try:
            return subprocess.run([exe, *self.flags, *args], input=stdin, capture_output=True, text=True,
                                  check=False, timeout=60)  # fmt: skip
        except FileNotFoundError:
            raise ClusterError(
                f"kubectl not found ({self.binary}): install it, or pass --kubectl PATH"
            ) from None

    def get(self, *args: str) -> dict[str, Any]:
        """`kubectl get ARGS -o json`; a refusal (RBAC, an API not served) is a ClusterError naming it."""
        done = self._run("get", *args, "-o", "json")
        if done.returncode != 0:
            raise ClusterError(f"kubectl get {' '.join(args)} failed: {_said(done.stderr)}")
        return dict(json.loads(done.stdout))

    def raw(self, path: str) -> dict[str, Any] | None:
        """A raw GET (an aggregated API such as Kueue's visibility API); None when it is not served or denied."""
        done = self._run("get", "--raw", path)
        return dict(json.loads(done.stdout)) if done.returncode == 0 else None

    def can_i(self, verb: str, resource: str, namespace: str) -> bool:
        done = self._run("auth", "can-i", verb, resource, "-n", namespace)
        return done.stdout.strip() == "yes"

    def create(self, obj: dict[str, Any]) -> str:
        """Create an object; "" or kubectl's one-line refusal."""
        done = self._run("create", "-f", "-", stdin=json.dumps(obj))
        return "" if done.returncode == 0 else _said(done.stderr)

    def namespace(self) -> str:
        """The current context's namespace ("" when it sets none)."""
        done = self._run("config", "view", "--minify", "-o", "jsonpath={..namespace}")
        return done.stdout.strip() if done.returncode == 0 else ""
