"""`kubectl gpufleet`: the console script `kubectl-gpufleet`, which kubectl finds on PATH as a plugin.

    kubectl gpufleet quota [-n NAMESPACE]
    kubectl gpufleet queue [-n NAMESPACE] [--no-events]
    kubectl gpufleet why JOB [-n NAMESPACE] [--no-events]
    kubectl gpufleet eta (JOB | -f job.yaml) [-n NAMESPACE] [--no-events]

kubectl hands a plugin its arguments but not its global flags' effect, so `--kubeconfig`, `--context`, `--as`
and `--as-group` are taken here and passed to the kubectl it runs. Bad arguments exit 2 with one line; a
cluster that cannot be read exits 3.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from scheduler.explain import commands, when
from scheduler.explain.cluster import ClusterError, Kubectl


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line and exit 2, instead of argparse's usage block."""
        print(f"kubectl gpufleet: {message} (see kubectl gpufleet --help)", file=sys.stderr)
        raise SystemExit(2)


def _common(p: argparse.ArgumentParser, top: bool) -> None:
    """kubectl's global flags and -n, before or after the subcommand (`kubectl gpufleet quota -n vision`);
    a subcommand's copy has no default, so it never undoes the one given before it."""

    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS

    p.add_argument(
        "--kubectl", default=default("kubectl"), help="the kubectl to run (default: kubectl on PATH)"
    )
    p.add_argument("--kubeconfig", default=default(""), help="kubeconfig file (default: kubectl's)")
    p.add_argument("--context", default=default(""), help="kubeconfig context")
    p.add_argument(
        "--as", dest="as_", default=default(""), metavar="USER", help="impersonate USER (kubectl --as)"
    )
    p.add_argument(
        "--as-group", action="append", default=default([]), metavar="GROUP", help="impersonate GROUP"
    )
    p.add_argument(
        "-n", "--namespace", default=default(""), help="your team's namespace (default: the context's)"
    )


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="kubectl gpufleet", description="Your team's GPU quota, place in line, and why a job waits."
    )
    _common(top, top=True)
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    q = sub.add_parser("quota", help="guarantee, use, borrowing and lending per pool; the cohort's free GPUs")
    _common(q, top=False)
    q = sub.add_parser("queue", help="your waiting jobs in Kueue's order, each with its reason")
    _common(q, top=False)
    q.add_argument("--no-events", action="store_true", help="do not record the answers as Events")
    w = sub.add_parser("why", help="one job's story: reason, position, checks, preemptions, nodes")
    _common(w, top=False)
    w.add_argument("job", metavar="JOB", help="a Job (or other job kind) name, or a Workload name")
    w.add_argument("--no-events", action="store_true", help="do not record the answer as an Event")
    e = sub.add_parser(
        "eta", help="when a waiting job starts (p50, p90), or a manifest would if submitted now"
    )
    _common(e, top=False)
    e.add_argument("job", metavar="JOB", nargs="?", default="", help="a waiting job (or Workload) name")
    e.add_argument("-f", "--filename", default="", help="a Job manifest not yet submitted: a dry run")
    e.add_argument("--no-events", action="store_true", help="do not record the answer as an Event")
    return top


def manifest(path: str) -> dict[str, Any]:
    """The one object of a manifest file; bad input is a ClusterError naming the file (exit 2)."""
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise ClusterError(f"-f {path}: cannot read it as YAML ({str(exc).splitlines()[0]})", 2) from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ClusterError(f"-f {path}: expected one Job object, found {len(docs)} documents", 2)
    return docs[0]


def kubectl_of(args: argparse.Namespace) -> Kubectl:
    return Kubectl.of(
        args.kubectl, args.kubeconfig or "", args.context or "", args.as_ or "", tuple(args.as_group)
    )


def run(argv: Sequence[str]) -> str:
    args = parser().parse_args(list(argv))
    kubectl = kubectl_of(args)
    if args.command == "quota":
        return commands.quota(kubectl, args.namespace)
    if args.command == "queue":
        return commands.queue(kubectl, args.namespace, record=not args.no_events)
    if args.command == "eta":
        if bool(args.job) == bool(args.filename):
            raise ClusterError("eta: give JOB or -f FILE (one of them)", 2)
        if args.filename:
            return when.eta_manifest(kubectl, manifest(args.filename), args.namespace)
        return when.eta(kubectl, args.job, args.namespace, record=not args.no_events)
    return commands.why(kubectl, args.job, args.namespace, record=not args.no_events)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        print(run(sys.argv[1:] if argv is None else argv))
    except ClusterError as exc:
        print(f"kubectl gpufleet: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
