"""`invoke usage` output: a table on the terminal, JSON or CSV on request, PNG plots in build/<stack>/usage/."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from infra.monitoring.usage import Row, UsageReport
from infra.tables import Justify, print_table

COLUMNS = (
    ("allocated GPU-h", "allocated_h", "{:.1f}"),
    ("used GPU-h", "used_h", "{:.1f}"),
    ("idle GPU-h", "idle_h", "{:.1f}"),
    ("cost USD", "cost_usd", "{:.2f}"),
    ("quota GPU-h", "quota_h", "{:.1f}"),
    ("quota used", "quota_utilisation", "{:.0%}"),
    ("wait p50", "wait_p50_s", "{}"),
    ("wait p95", "wait_p95_s", "{}"),
)
JUSTIFY: list[Justify] = ["right" if i else "left" for i in range(1 + len(COLUMNS))]  # the name, then numbers


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def cell(row: Row, attr: str, fmt: str) -> str:
    value = getattr(row, attr)
    if value is None:
        return "-"
    return duration(value) if attr.startswith("wait") else fmt.format(value)


def _window(report: UsageReport) -> str:
    start = datetime.fromtimestamp(report.start - report.step, UTC).strftime("%Y-%m-%d %H:%M")
    end = datetime.fromtimestamp(report.end, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{start} to {end}"


def print_report(report: UsageReport, console: Console) -> None:
    """A table per team and per pool, never cut in a narrow terminal (`infra.tables.print_table`): where nine
    columns of numbers do not fit side by side, one record per team or pool instead.
    `--json` and `--csv` carry the unrounded values."""
    head = [header for header, _, _ in COLUMNS]
    for title, rows in (("team", report.teams), ("pool", report.pools)):
        print_table(
            console,
            f"{report.stack}: GPU usage per {title}, {report.since} ({_window(report)})",
            [title, *head],
            [[row.name, *(cell(row, attr, fmt) for _, attr, fmt in COLUMNS)] for row in rows],
            justify=JUSTIFY,
        )
    for note in report.notes:
        console.print(f"note: {note}")


def to_json(report: UsageReport) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"


def to_csv(report: UsageReport) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    keys = list(Row("x").as_dict())
    writer.writerow(["kind", *keys])
    for kind, rows in (("team", report.teams), ("pool", report.pools)):
        for row in rows:
            writer.writerow([kind, *("" if v is None else v for v in row.as_dict().values())])
    return out.getvalue()


def write_plots(report: UsageReport, folder: Path) -> list[Path]:
    """Per-team and per-pool GPU-hours (allocated, used, idle) as bars; allocated GPUs over time per team. A chart
    with no number to draw is not written: an empty bar chart reads as "zero hours", not "no data"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, rows in (("teams", report.teams), ("pools", report.pools)):
        if not any(getattr(r, a) is not None for r in rows for a in ("allocated_h", "used_h", "idle_h")):
            continue
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4))
        width = 0.27
        for i, (label, attr) in enumerate(
            (("allocated", "allocated_h"), ("used", "used_h"), ("idle", "idle_h"))
        ):
            ax.bar(
                [x + (i - 1) * width for x in range(len(rows))],
                [getattr(r, attr) or 0 for r in rows],
                width,
                label=label,
            )
        ax.set_xticks(range(len(rows)), [r.name for r in rows])
        ax.set_ylabel("GPU-hours")
        ax.set_title(f"{report.stack}: GPU-hours per {kind[:-1]}, {report.since}")
        ax.legend()
        fig.tight_layout()
        path = folder / f"gpu-hours-{kind}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    if any(points for points in report.timeline.values()):
        fig, ax = plt.subplots(figsize=(8, 4))
        for team, points in sorted(report.timeline.items()):
            ax.plot([(t - report.end) / 3600 for t, _ in points], [v for _, v in points], label=team)
        ax.set_xlabel(f"hours before {datetime.fromtimestamp(report.end, UTC):%Y-%m-%d %H:%M} UTC")
        ax.set_ylabel("GPUs allocated")
        ax.set_title(f"{report.stack}: GPUs allocated per team")
        ax.legend()
        fig.tight_layout()
        path = folder / "allocated-over-time.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
