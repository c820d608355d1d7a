"""`invoke reclaim`'s cluster side: read the opted-in teams' pods and Workloads with kubectl, decide
(`infra.monitoring.reclaim`), and with `--apply` patch the Workloads and record Events.

kubectl runs through the caller's `run` (invoke's `Context.run`: a command string, `hide`, `warn`, `env`,
`in_stream`), so the command line can be tested without a cluster. The cluster is the stack's own: an existing
stack names its kubeconfig (and context); an AWS stack's is written by `invoke kubeconfig` and exported.
"""

from __future__ import annotations

import io
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.errors import ConfigError, ToolMissing
from infra.monitoring.evidence import gather
from infra.monitoring.prometheus import Prometheus
from infra.monitoring.reclaim import Decision, plan_reclaim, resolve_owners, team_policies, windows
from infra.monitoring.usage import parse_until
from infra.spec import ClusterSpec

Run = Callable[..., Any]  # invoke's Context.run


def kubectl_failure(args: str, stderr: str, spec: ClusterSpec) -> str:
    """One line for a failed kubectl call: its own message without client-go's klog lines (`E1201 12:00:00
    ... memcache.go:265] "Unhandled Error"`, the klog header format `Lmmdd hh:mm:ss.uuuuuu`), and what to do."""
    lines = [line for line in stderr.splitlines() if line.strip() and not re.match(r"^[IWEF]\d{4} ", line)]
    said = lines[-1].strip() if lines else (stderr.strip().splitlines() or ["no message"])[-1]
    if spec.cluster.kubeconfig:
        fix = f"check gpufleet:cluster.kubeconfig ({spec.cluster.kubeconfig}) reaches the cluster"
    else:
        fix = f"run `invoke kubeconfig --stack {spec.stack}` and export the KUBECONFIG it prints"
    return f"kubectl {args.split(' -o ')[0]} failed: {said}; {fix}"


class StackKubectl:
    """kubectl against the stack's cluster, answering JSON; a failure is one line with the fix (exit 3)."""

    def __init__(self, spec: ClusterSpec, run: Run) -> None:
        self.spec, self.run = spec, run
        self.env = (
            {"KUBECONFIG": str(Path(spec.cluster.kubeconfig).expanduser())} if spec.cluster.kubeconfig else {}
        )
        context = spec.cluster.kubeconfig_context
        self.context = f"--context {shlex.quote(context)} " if context else ""

    def check(self) -> None:
        found = self.run("kubectl version --client", hide=True, warn=True)
        if found is None or found.exited != 0:
            raise ToolMissing(
                "kubectl not found or not working: install it and point KUBECONFIG at the cluster"
            )

    def __call__(
        self, args: str, stdin: str | None = None, missing_ok: bool = False
    ) -> dict[str, Any] | None:
        stream = {} if stdin is None else {"in_stream": io.StringIO(stdin)}
        got = self.run(f"kubectl {self.context}{args}", hide=True, warn=True, env=self.env, **stream)
        if got is None or got.exited != 0:
            if missing_ok:
                return None
            raise ToolMissing(kubectl_failure(args, getattr(got, "stderr", ""), self.spec))
        return dict(json.loads(got.stdout or "{}"))

    def items(self, kind: str, ns: str) -> list[dict[str, Any]]:
        return list((self(f"get {kind} -n {shlex.quote(ns)} -o json") or {}).get("items", []))

    def owner(self, ns: str, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        group, _, version = api_version.rpartition("/")
        what = f"{kind}.{version}.{group}" if group else kind
        return self(
            f"get {shlex.quote(what)} {shlex.quote(name)} -n {shlex.quote(ns)} -o json", missing_ok=True
        )


def reclaim_idle(
    spec: ClusterSpec,
    *,
    prometheus: str,
    apply: bool,
    until: str,
    run: Run,
    say: Callable[[str], None] = print,
) -> list[Decision] | None:
    """Decide for every workload of the opted-in teams and say each decision; with `apply`, warn and
    deactivate. None when no team opts in (nothing is read)."""
    if apply and not spec.cluster.monitoring.reclaim_idle:
        raise ConfigError(
            "gpufleet:cluster.monitoring.reclaimIdle is false: set it to true to let --apply act on workloads"
        )
    policies = team_policies(spec)
    if not policies:
        return None
    at = parse_until(until)
    evidence = gather(Prometheus(prometheus), windows(policies), at, spec.cluster.monitoring.scrape_interval)
    kubectl = StackKubectl(spec, run)
    kubectl.check()
    namespaces = [p.namespace for p in policies]
    pods = {ns: kubectl.items("pods", ns) for ns in namespaces}
    workloads = {ns: kubectl.items("workloads.kueue.x-k8s.io", ns) for ns in namespaces}
    owners = resolve_owners(
        [p for ns in namespaces for p in pods[ns]],
        [w for ns in namespaces for w in workloads[ns]],
        kubectl.owner,
    )
    decisions = plan_reclaim(policies, evidence, pods, workloads, owners, at)
    for d in decisions:
        say(d.line(apply))
        patch, event = d.patch(at), d.event(at)
        if apply and patch is not None:
            kubectl(
                f"patch workloads.kueue.x-k8s.io {shlex.quote(d.workload)} -n {shlex.quote(d.namespace)} "
                f"--type merge -p {shlex.quote(json.dumps(patch))} -o json"
            )
        if apply and event is not None:
            kubectl("create -f - -o json", stdin=json.dumps(event))
    return decisions


def summary(decisions: list[Decision], apply: bool) -> str:
    """The closing line: how many of each action, and whether they were applied."""
    counts = counted(decisions)
    return f"{'applied' if apply else 'dry run (--apply to act)'}: {', '.join(f'{n} {a}' for a, n in counts.items())}"


ACTIONS = ("warn", "deactivate", "clear", "skip", "refuse")


def counted(decisions: list[Decision]) -> dict[str, int]:
    return {a: sum(d.action == a for d in decisions) for a in ACTIONS}


def as_json(decisions: list[Decision] | None, apply: bool) -> str:
    """`invoke reclaim --json`: every decision with its reason, and the counts."""
    listed = decisions or []
    return json.dumps(
        {
            "applied": apply,
            "decisions": [d.as_dict() for d in listed],
            "counts": counted(listed),
            **({} if decisions is not None else {"note": "no team opts in (gpufleet:teams[].reclaimIdle)"}),
        },
        indent=2,
    )
