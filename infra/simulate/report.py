"""`invoke simulate`'s terminal tables: the policies compared, and the real scheduler's replays beside them.

Rows are built here from the simulator's own results (`scheduler.sim.RunResult`, the twin's `TwinRun`) so that
tasks.py only parses, runs and prints; they are printed through `infra.tables.print_table`, which never cuts a
value in a narrow terminal. report.md and `--json` keep the full results.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any

from rich.console import Console

from infra.tables import print_table
from scheduler.sim import Cluster, RunResult, Workload
from scheduler.sim.report import summarize

SUMMARY_HEAD = ["policy", "unallocated GPU % @100", "frag amount %", "failed pods", "s/run"]
TWIN_HEAD = ["placement", "where", "unallocated GPU % @100", "failed pods", "pods/s"]
# The real scheduler's profiles (twin) and the simulator's policies that model them, by the name shown.
TWIN_AS = {"MostAllocated": "gpu-binpack (MostAllocated)", "FragmentationAware": "FragmentationAware"}
SIM_AS = {"MostAllocated": "gpu-binpack (MostAllocated)", "FGD-Extender": "FragmentationAware"}


def summary_title(name: str, cluster: Cluster, workload: Workload) -> str:
    return f"{name}: {cluster.size} nodes, {int(cluster.num_gpu.sum())} GPUs; {workload.size} pods"


def summary_rows(results: Sequence[RunResult]) -> list[list[str]]:
    """Per policy over its seeds, least unallocated first (`scheduler.sim.report.summarize`)."""
    return [
        [
            s.policy,
            f"{s.unallocated_mean:.2f} ± {s.unallocated_std:.2f}",
            f"{s.frag_amount_mean:.2f}",
            f"{s.failed_mean:.1f}",
            f"{s.seconds_mean:.2f}",
        ]
        for s in summarize(results)
    ]


def print_summary(
    console: Console, name: str, cluster: Cluster, workload: Workload, results: Sequence[RunResult]
) -> None:
    print_table(
        console,
        summary_title(name, cluster, workload),
        SUMMARY_HEAD,
        summary_rows(results),
        justify=["left", "right", "right", "right", "right"],
    )


def twin_rows(runs: Sequence[Any], results: Sequence[RunResult]) -> list[list[str]]:
    """Means over the seeds: each real-scheduler profile's replays (`twin.replay.TwinRun`: a RunResult
    and the rate the real scheduler placed pods at), then the simulator's policies that model them."""
    rows = []
    for profile, label in TWIN_AS.items():
        mine = [r for r in runs if r.result.policy == profile]
        if mine:
            rows.append(
                [
                    label,
                    "twin",
                    f"{mean(r.result.unallocated(100) for r in mine):.2f}",
                    f"{mean(r.result.failed for r in mine):.1f}",
                    f"{mean(r.pods_per_second for r in mine):.1f}",
                ]
            )
    for policy, label in SIM_AS.items():
        sims = [r for r in results if r.policy == policy]
        if (
            not sims and policy == "FGD-Extender"
        ):  # on DRA claims the simulator's FGD is the extender's scoring
            sims = [r for r in results if r.policy == "FGD"]
        if sims:
            rows.append(
                [
                    label,
                    "simulator",
                    f"{mean(r.unallocated(100) for r in sims):.2f}",
                    f"{mean(r.failed for r in sims):.1f}",
                    "",
                ]
            )
    return rows


def print_twin_runs(console: Console, runs: Sequence[Any], results: Sequence[RunResult], name: str) -> None:
    """The real scheduler's replays beside the simulator's, per profile (means over the seeds)."""
    print_table(
        console,
        f"{name}: through the real scheduler (twin) and in the simulator, same seeds",
        TWIN_HEAD,
        twin_rows(runs, results),
        justify=["left", "left", "right", "right", "right"],
    )
