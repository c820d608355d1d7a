"""`gpufleet-slurm`: the console script a Slurm user runs on a login node.

    gpufleet-slurm quota [--account TEAM]
    gpufleet-slurm queue [--account TEAM]
    gpufleet-slurm why JOBID
    gpufleet-slurm eta JOBID

Slurm users work on a login node with `sbatch` and `squeue`, not with the project's clone or a kubeconfig, so
the answers take nothing but Slurm: the team is an account (default: the one team the caller is a user of).
Bad arguments exit 2 with one line; a cluster that cannot be read exits 3.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scheduler.explain.cluster import ClusterError
from scheduler.slurm.answers import commands
from scheduler.slurm.answers.reader import Slurm

PROG = "gpufleet-slurm"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line and exit 2, instead of argparse's usage block."""
        print(f"{PROG}: {message} (see {PROG} --help)", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog=PROG, description="Your team's GPU limits, place in line, why a job waits, when it starts."
    )
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, said in (("quota", "quota, use, borrowing allowance and borrowed GPUs per partition"),
                       ("queue", "your team's pending jobs in order, each with its reason")):  # fmt: skip
        p = sub.add_parser(name, help=said)
        p.add_argument("--account", "-A", default="", help="your team's account (default: your one team)")
    for name, said in (("why", "one job's story: reason, position, priority factors"),
                       ("eta", "when a pending job starts, from squeue --start, with what it assumed")):  # fmt: skip
        p = sub.add_parser(name, help=said)
        p.add_argument("job", metavar="JOBID", help="a Slurm job id")
    return top


def run(argv: Sequence[str], slurm: Slurm | None = None) -> str:
    args = parser().parse_args(list(argv))
    slurm = slurm or Slurm()
    if args.command == "quota":
        return commands.quota(slurm, args.account)
    if args.command == "queue":
        return commands.queue(slurm, args.account)
    if args.command == "why":
        return commands.why(slurm, args.job)
    return commands.eta(slurm, args.job)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        print(run(sys.argv[1:] if argv is None else argv))
    except ClusterError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
