"""`invoke usage`: GPU-hours per team and pool, whichever orchestrator the stack runs.

On Kubernetes the report reads the stack's Prometheus (`infra.monitoring.usage`): allocated, used and idle
GPU-hours, cost, quota use and queue waits, with plots. On a Slurm stack it reads Slurm's own accounting
(`infra.slurm.usage`, one `sacct` call): allocated GPU-hours and quota use.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from rich.console import Console

from infra.errors import ConfigError, writing
from infra.monitoring import usage_report
from infra.monitoring.prometheus import Prometheus
from infra.monitoring.usage import build_report
from infra.slurm import usage as slurm_usage
from infra.slurm.site import uses_slurm
from infra.spec import ClusterSpec

Format = Literal["table", "json", "csv"]


DEFAULT_PROMETHEUS = "http://localhost:9090"  # a `kubectl port-forward` of the stack's Prometheus


def prometheus_url(spec: ClusterSpec, given: str) -> str:
    """The Prometheus to read: `--prometheus`, else the port-forward of the one the stack deploys or adopts. A
    stack that has none (`monitoring.prometheus: none`) must be given one: pointing at a Service the stack never
    created would send the user looking for it."""
    if given:
        return given
    if not spec.cluster.monitoring.enabled:
        raise ConfigError(
            f"stack {spec.stack!r} has no Prometheus (gpufleet:cluster.monitoring.prometheus: none): pass "
            "--prometheus URL of one that scrapes its cluster, or set monitoring.prometheus to install or "
            "existing (docs/operations.md)"
        )
    return DEFAULT_PROMETHEUS


def report_usage(
    spec: ClusterSpec,
    *,
    since: str,
    until: str,
    prices: dict[str, float | None],
    fmt: Format,
    console: Console,
    prometheus: str,
    sacct: str,
    plots: Path,
) -> None:
    """Print the report for the window in `fmt`; on Kubernetes also write its plots to `plots` (a line on
    stderr says where, or why there are none)."""
    if uses_slurm(spec):  # no Prometheus of gpufleet's: Slurm's own accounting
        slurm = slurm_usage.slurm_usage(spec, since, until, sacct, prices)
        if fmt == "table":
            slurm_usage.print_usage(slurm, console)
        else:
            print((slurm_usage.to_json if fmt == "json" else slurm_usage.to_csv)(slurm), end="")
        return
    report = build_report(spec, Prometheus(prometheus_url(spec, prometheus)), since, until, prices)
    if fmt == "json":
        print(usage_report.to_json(report), end="")
    elif fmt == "csv":
        print(usage_report.to_csv(report), end="")
    else:
        usage_report.print_report(report, console)
    with writing(plots):
        written = usage_report.write_plots(report, plots)
    if written:
        print(f"wrote {len(written)} plots to {written[0].parent}", file=sys.stderr)
    else:
        print("no plots: Prometheus has none of the report's metrics for this window", file=sys.stderr)
