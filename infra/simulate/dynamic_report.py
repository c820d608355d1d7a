"""`invoke simulate --dynamic`: the comparison of the stack's policy and the alternatives over time, as rows,
a table, JSON, a report and plots.

The comparison (:func:`scheduler.sim.dynamic.alternatives.run_comparison`) runs every registered approach
twice, with the autoscaler (pools from `minSize`, nodes after their provisioning delay) and without (every node
up all the time), on the same trace, teams and seed. The table puts the numbers a platform owner defends side
by side; the JSON adds each row's pools; `report.md` adds per-pool rows (a pool that never receives work shows
0 runs), per-team rows and two plots (allocated GPUs and waiting jobs over time, for the
approaches registered as plotted and the stack's own; wait distributions). All three name, in the stack's
own runs, the queues that evicted each other's jobs in one pool both ways
(:mod:`scheduler.sim.dynamic.exchanges`), with the stack option that ends it where the stack's fair sharing
allows such an exchange.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from infra.tables import print_table
from scheduler.sim.dynamic import Result, Settings
from scheduler.sim.dynamic.alternatives import REGISTRY
from scheduler.sim.dynamic.exchanges import AT_LEAST, exchanges

# Kueue's first fair-sharing strategy lets two borrowers at equal shares evict each other (docs/simulation.md);
# the strict one alone does not
REMEDY = "`scheduling.fairSharingPreemptionStrategies: [LessThanInitialShare]` ends it (docs/scheduling.md)"

HEAD = (
    "approach",
    "autoscaling",
    "wait p50 min",
    "wait p95 min",
    "queued mean min",
    "slowdown",
    "blocked by policy GPU-h",
    "blocked by fragmentation GPU-h",
    "utilisation %",
    "preemptions",
    "preempted GPU-h",
    "pods-ready evictions",
    "never started",
    "node-hours",
    "cost $",
)


def comparison_rows(results: dict[tuple[str, bool], Result]) -> list[dict[str, Any]]:
    """One row per (alternative, autoscaling) for the table and JSON."""
    rows = []
    for key, r in results.items():
        name, scaled = key
        rows.append(
            {
                "approach": name,
                "autoscaling": scaled,
                "wait_p50_min": round(r.wait_p50_s / 60, 1),
                "wait_p95_min": round(r.wait_p95_s / 60, 1),
                "queued_mean_min": round(r.queued_mean_s / 60, 1),
                "queued_p95_min": round(r.queued_p95_s / 60, 1),
                "slowdown": round(r.slowdown_mean, 2),
                "blocked_idle_gpu_h": round(r.blocked_idle_gpu_hours, 1),
                "blocked_policy_gpu_h": round(r.blocked_policy_gpu_hours, 1),
                "blocked_fragmentation_gpu_h": round(r.blocked_fragmentation_gpu_hours, 1),
                "utilisation_pct": round(100 * r.utilisation_ready, 1),
                "preemptions": r.preemptions,
                "preempted_gpu_h": round(r.preempted_gpu_hours, 1),
                "ready_evictions": r.ready_timeouts,
                "never_started": r.never_started,
                "node_hours": round(r.node_hours, 1),
                "cost_usd": None if r.cost is None else round(r.cost, 0),
                "pools": pool_rows(r),
            }
        )
    return rows


def pool_rows(r: Result) -> list[dict[str, Any]]:
    """Per pool of one run: runs started there, GPU-hours and utilisation of its Ready GPUs, and admissions there
    that waitForPodsReady evicted (quota held while no node could take the pods)."""
    return [
        {"pool": p.pool, "runs": p.runs, "gpu_h": round(p.gpu_hours, 1),
         "utilisation_pct": round(100 * p.utilisation_ready, 1), "ready_evictions": p.ready_evictions}
        for p in r.pools
    ]  # fmt: skip


def remedy(settings: Settings) -> str | None:
    """The stack option that ends an exchange, where the stack's fair sharing runs Kueue's first strategy first
    (`LessThanOrEqualToFinalShare` holds both ways at equal shares); otherwise none is known."""
    if settings.fair_sharing and settings.fair_preemption_strategies[:1] == ("LessThanOrEqualToFinalShare",):
        return REMEDY
    return None


def exchange_rows(
    results: dict[tuple[str, bool], Result], stack_approach: str, settings: Settings
) -> list[dict[str, Any]]:
    """One row per run of the stack's own approach (with autoscaling and without) and pair of queues that
    evicted each other in one pool at least ``AT_LEAST`` times each way, with the remedy for the stack's
    ``settings``. The stack's rows alone: its configuration is what the remedy changes, and the alternatives
    that keep its queues would repeat the same pairs (their counts are in the JSON's runs)."""
    fix = remedy(settings)
    return [
        {"approach": name, "autoscaling": scaled, "pool": e.pool, "first": e.first, "second": e.second,
         "first_evicted": e.first_evicted, "second_evicted": e.second_evicted, "remedy": fix}
        for (name, scaled), r in results.items() if name == stack_approach
        for e in exchanges(r.preempted_by)
    ]  # fmt: skip


def exchange_line(row: dict[str, Any]) -> str:
    """One exchange in words: the run, the pool, the two queues and the count each way, and the remedy."""
    scaling = "with autoscaling" if row["autoscaling"] else "at maxSize"
    a, b = row["first"], row["second"]
    line = (
        f"{row['approach']} {scaling}: {a} and {b} evict each other's jobs in pool {row['pool']} "
        f"({a} evicted {b}'s {row['first_evicted']:,} times, {b} evicted {a}'s {row['second_evicted']:,})"
    )
    return f"{line}: {row['remedy']}" if row["remedy"] else line


def row_cells(row: dict[str, Any]) -> list[str]:
    cost = row["cost_usd"]
    return [
        row["approach"],
        "yes" if row["autoscaling"] else "no",
        f"{row['wait_p50_min']:g}",
        f"{row['wait_p95_min']:g}",
        f"{row['queued_mean_min']:g}",
        f"{row['slowdown']:g}",
        f"{row['blocked_policy_gpu_h']:g}",
        f"{row['blocked_fragmentation_gpu_h']:g}",
        f"{row['utilisation_pct']:g}",
        str(row["preemptions"]),
        f"{row['preempted_gpu_h']:g}",
        str(row["ready_evictions"]),
        str(row["never_started"]),
        f"{row['node_hours']:g}",
        "-" if cost is None else f"{cost:,.0f}",
    ]


EXCHANGES_HEAD = f"Queues that evicted each other's jobs in one pool, at least {AT_LEAST:,} times each way:"


def print_comparison(
    console: Console,
    title: str,
    results: dict[tuple[str, bool], Result],
    stack_approach: str,
    settings: Settings,
) -> None:
    """The table, then each exchange of the stack's own runs on a line of its own (nothing when there is
    none); ``settings`` are the stack's, which decide the remedy."""
    rows = comparison_rows(results)
    print_table(console, title, list(HEAD), [row_cells(r) for r in rows], key=2)
    found = exchange_rows(results, stack_approach, settings)
    if found:
        console.print(EXCHANGES_HEAD, markup=False, highlight=False, soft_wrap=True)
        for row in found:
            console.print(f"- {exchange_line(row)}", markup=False, highlight=False, soft_wrap=True)


def to_json(
    results: dict[tuple[str, bool], Result], context: dict[str, Any], stack_approach: str, settings: Settings
) -> str:
    runs = [
        {"approach": name, "autoscaling": scaled, **r.to_dict(waits=False)}
        for (name, scaled), r in results.items()
    ]
    out = {
        "context": context,
        "comparison": comparison_rows(results),
        "exchanges": exchange_rows(results, stack_approach, settings),
        "runs": runs,
    }
    return json.dumps(out, indent=2) + "\n"


def _plots(results: dict[tuple[str, bool], Result], folder: Path, stack_policy: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plotted = [a.name for a in REGISTRY.values() if a.plotted]
    shown = [a for a in dict.fromkeys([*plotted, stack_policy]) if any(k[0] == a for k in results)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for name in shown:
        r = results.get((name, True))
        if r is None:
            continue
        hours = [t / 3600 for t in r.timeline["t"]]
        top.step(hours, r.timeline["allocated"], where="post", label=name, linewidth=1.2)
        bottom.step(hours, r.timeline["waiting_jobs"], where="post", label=name, linewidth=1.2)
    if shown:
        first = results[(shown[0], True)]
        top.step([t / 3600 for t in first.timeline["t"]], first.timeline["ready"], where="post", color="grey",
                 linestyle=":", label=f"GPUs on Ready nodes ({shown[0]})")  # fmt: skip
    top.set_ylabel("allocated GPUs")
    top.set_title("Allocated GPUs and waiting jobs over time (with autoscaling)")
    top.legend(fontsize=8)
    bottom.set_ylabel("jobs waiting")
    bottom.set_xlabel("hours from the first arrival")
    bottom.legend(fontsize=8)
    over_time = _save(fig, folder / "over-time.png")

    fig, ax = plt.subplots(figsize=(10, 5))
    for (name, scaled), r in results.items():
        if not scaled:
            continue
        waits = sorted(w / 60 for team in r.waits.values() for w in team)
        if not waits:
            continue
        ax.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post", label=name)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("queue wait, minutes (log scale past 1)")
    ax.set_ylabel("share of started jobs")
    ax.set_title("Queue waits (with autoscaling): further left is better")
    ax.legend(fontsize=8)
    return [over_time, _save(fig, folder / "waits.png")]


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_dynamic_report(
    results: dict[tuple[str, bool], Result],
    folder: Path,
    title: str,
    context: list[str],
    stack_policy: str,
    settings: Settings,
) -> list[Path]:
    """report.md (comparison, queues that evict each other, per-pool rows, per-team rows of the stack's
    policy, the plots) in ``folder``; ``settings`` are the stack's, which decide the remedy."""
    folder.mkdir(parents=True, exist_ok=True)
    plots = _plots(results, folder, stack_policy)
    lines = [f"# Dynamic simulation: {title}", "", *[f"- {c}" for c in context], "", "## Comparison", ""]
    lines += ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in comparison_rows(results)]
    lines += ["", "Approaches:", ""] + [
        f"- `{a.name}`: {a.description}" for a in REGISTRY.values() if any(k[0] == a.name for k in results)
    ]
    found = exchange_rows(results, stack_policy, settings)
    lines += ["", f"## Queues that evict each other, `{stack_policy}`", ""]
    if found:
        lines += [EXCHANGES_HEAD, "", *[f"- {exchange_line(row)}" for row in found]]
    else:
        lines.append(
            f"None: no two queues evicted each other's jobs in one pool at least {AT_LEAST:,} times each way."
        )
    lines += ["", "## Per pool, with autoscaling", "",
              "| approach | pool | runs | GPU-h | utilisation % | pods-ready evictions |", "|---|---|---|---|---|---|"]  # fmt: skip
    for (name, scaled), r in results.items():
        if scaled:
            lines += [f"| {name} | {p['pool']} | {p['runs']} | {p['gpu_h']:g} | {p['utilisation_pct']:g} | "
                      f"{p['ready_evictions']} |" for p in pool_rows(r)]  # fmt: skip
    own = results.get((stack_policy, True))
    if own is not None:
        lines += ["", f"## Per team, `{stack_policy}` with autoscaling", ""]
        team_head = ("team", "jobs", "wait p50 min", "wait p95 min", "GPU-h", "share %", "weight %", "blocked GPU-h",
                     "preempted")  # fmt: skip
        lines += ["| " + " | ".join(team_head) + " |", "|" + "---|" * len(team_head)]
        for t in own.teams:
            lines.append(
                f"| {t.team} | {t.jobs} | {t.wait_p50_s / 60:.1f} | {t.wait_p95_s / 60:.1f} | {t.gpu_hours:.1f} | "
                f"{100 * t.share:.1f} | {100 * t.weight_share:.1f} | {t.blocked_idle_gpu_hours:.1f} | {t.preempted} |"
            )
    lines += ["", *[f"![{p.stem}]({p.name})" for p in plots], ""]
    report = folder / "report.md"
    report.write_text("\n".join(lines))
    return [report, *plots]
