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


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="kubectl gpufleet", description="Your team's GPU quota, place in line, and why a job waits."
    )
    top.add_argument("--kubectl", default="kubectl", help="the kubectl to run (default: kubectl on PATH)")
    top.add_argument("--kubeconfig", help="kubeconfig file (default: kubectl's)")
    top.add_argument("--context", help="kubeconfig context")
    top.add_argument("--as", dest="as_", metavar="USER", help="impersonate USER (kubectl --as)")
    top.add_argument("--as-group", action="append", default=[], metavar="GROUP", help="impersonate GROUP")
    top.add_argument("-n", "--namespace", default="", help="your team's namespace (default: the context's)")
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("quota", help="guarantee, use, borrowing and lending per pool; the cohort's free GPUs")
    q = sub.add_parser("queue", help="your waiting jobs in Kueue's order, each with its reason")
    q.add_argument("--no-events", action="store_true", help="do not record the answers as Events")
    w = sub.add_parser("why", help="one job's story: reason, position, checks, preemptions, nodes")
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
