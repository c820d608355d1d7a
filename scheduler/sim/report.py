"""Report of a set of simulation runs: a comparison table, PNG plots and report.md.

Pure of any cluster or cloud: it takes RunResults and writes files, so `invoke simulate` and the benchmarks
share one way of showing results.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.sim.runner import RunResult, mean_curve

ARRIVED = np.arange(131)


@dataclass(frozen=True)
class PolicySummary:
    """One policy over its seeds, at arrived = 100 %."""

    policy: str
    runs: int
    unallocated_mean: float
    unallocated_std: float
    frag_amount_mean: float
    frag_ratio_mean: float
    failed_mean: float
    seconds_mean: float


def by_policy(results: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        groups.setdefault(r.policy, []).append(r)
    return groups


def summarize(results: Sequence[RunResult], arrived_pct: int = 100) -> list[PolicySummary]:
    """Per policy, best (least unallocated) first."""
    rows = []
    for policy, runs in by_policy(results).items():
        unalloc = np.array([r.unallocated(arrived_pct) for r in runs])
        rows.append(
            PolicySummary(
                policy=policy,
                runs=len(runs),
                unallocated_mean=float(unalloc.mean()),
                unallocated_std=float(unalloc.std()),
                frag_amount_mean=float(np.mean([r.frag_amount[arrived_pct] for r in runs])),
                frag_ratio_mean=float(np.mean([r.frag_ratio[arrived_pct] for r in runs])),
                failed_mean=float(np.mean([r.failed for r in runs])),
                seconds_mean=float(np.mean([r.seconds for r in runs])),
            )
        )
    return sorted(rows, key=lambda s: s.unallocated_mean)


LINE_STYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class CurveLayout:
    """What a plot of one curve per policy shows: the lines (label, style, values), the y range, the title."""

    lines: tuple[tuple[str, str, np.ndarray], ...]
    ylim: tuple[float, float] | None
    title: str


def curve_layout(
    results: Sequence[RunResult], field: str, invert: bool = False, title: str = ""
) -> CurveLayout:
    """Readable at a glance: a title naming the run and its seeds; the y-axis
    zoomed to the band the policies span from 90 % arrived on (where they differ), not 0-100 %; a line style
    per policy, and a policy whose curve is another's labelled so ("FGD-Extender (= FGD)") instead of hiding
    under it."""
    lines: list[tuple[str, str, np.ndarray]] = []
    for i, (policy, runs) in enumerate(sorted(by_policy(results).items())):
        raw = mean_curve(runs, field)
        y = 100.0 - raw if invert else raw
        same = next((label for label, _, other in lines if np.allclose(other, y)), None)
        name = f"{policy} (= {same.split(' (=')[0]})" if same else policy
        lines.append((name, LINE_STYLES[i % len(LINE_STYLES)], y))
    ylim = None
    if lines:
        late = np.concatenate([y[ARRIVED >= 90] for _, _, y in lines])
        ylim = (max(0.0, float(late.min()) - 2.0), min(100.0, float(late.max()) + 2.0))
    seeds = sorted({r.seed for r in results})
    full = f"{title} (seeds {', '.join(map(str, seeds))})" if title else ""
    return CurveLayout(tuple(lines), ylim, full)


def plot_curves(
    results: Sequence[RunResult],
    out: Path,
    field: str,
    ylabel: str,
    invert: bool = False,
    title: str = "",
) -> Path:
    """One line per policy: the seed-mean of a curve against arrived workload % (laid out by curve_layout)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layout = curve_layout(results, field, invert, title)
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (label, style, y) in enumerate(layout.lines):
        ax.plot(ARRIVED, y, label=label, linewidth=2.2 if i == 0 else 1.4, linestyle=style)
    ax.axvline(100, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("arrived workload (% of GPU capacity)")
    ax.set_ylabel(ylabel)
    ax.set_xlim(0, 130)
    if layout.ylim:
        ax.set_ylim(*layout.ylim)
    if layout.title:
        ax.set_title(layout.title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def markdown_table(summaries: Sequence[PolicySummary]) -> str:
    head = "| policy | runs | unallocated GPU % @100 (mean ± sd) | frag amount % | frag ratio % | failed pods | s/run |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(
            f"| {s.policy} | {s.runs} | {s.unallocated_mean:.2f} ± {s.unallocated_std:.2f} | "
            f"{s.frag_amount_mean:.2f} | {s.frag_ratio_mean:.2f} | {s.failed_mean:.1f} | {s.seconds_mean:.2f} |"
        )
    return "\n".join(lines)


def write_report(
    results: Sequence[RunResult], out_dir: Path, title: str, context: Sequence[str] = ()
) -> Path:
    """report.md with the comparison table and two plots; returns the report's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_curves(
        results, out_dir / "unallocated.png", "allocated", "unallocated GPU %", invert=True, title=title
    )
    plot_curves(
        results,
        out_dir / "fragmentation.png",
        "frag_amount",
        "fragmentation (% of GPU capacity)",
        title=title,
    )
    lines = [f"# {title}", "", *[f"- {c}" for c in context], ""]
    lines += [markdown_table(summarize(results)), ""]
    lines += ["## Unallocated GPUs", "", "![unallocated GPU % vs arrived workload](unallocated.png)", ""]
    lines += ["## Fragmentation", "", "![fragmentation vs arrived workload](fragmentation.png)", ""]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines))
    return report


def write_json(results: Sequence[RunResult], path: Path) -> None:
    """Per run: policy, seed, the 131-value curves, failed pods, seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.to_dict() for r in results], indent=1) + "\n")
