"""`kubectl gpufleet`: the console script `kubectl-gpufleet`, which kubectl finds on PATH as a plugin.

    kubectl gpufleet quota [-n NAMESPACE]
    kubectl gpufleet queue [-n NAMESPACE] [--no-events]
    kubectl gpufleet why JOB [-n NAMESPACE] [--no-events]

kubectl hands a plugin its arguments but not its global flags' effect, so `--kubeconfig`, `--context`, `--as`
and `--as-group` are taken here and passed to the kubectl it runs. Bad arguments exit 2 with one line; a
cluster that cannot be read exits 3.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scheduler.explain import commands
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
    return top


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
