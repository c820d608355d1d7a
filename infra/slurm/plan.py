"""The Slurm side of `invoke plan`: accounts, limits and partitions, with the Kubernetes plan's numbers."""

from __future__ import annotations

from rich.console import Console

from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from infra.tables import print_table
from scheduler.slurm import team_limits
from scheduler.slurm.policy import borrow_qos


def slurm_plan_rows(spec: ClusterSpec) -> tuple[list[str], list[list[str]]]:
    """The plan's Slurm table: per account and partition, the guaranteed GrpTRES and the borrow QOS's."""
    policy, pools = scheduler_inputs(spec)
    header = ["account", "partition", "nodes", "TRES", "guaranteed (GrpTRES)", "borrow QOS", "borrowable"]
    hosts = {p.name: len(p.hosts or ()) for p in spec.node_pools}
    rows = [
        [lim.team, lim.pool, str(hosts[lim.pool]), lim.tres, str(lim.guaranteed), borrow_qos(lim.team),
         str(lim.borrowable)]
        for lim in team_limits(policy, pools)
    ]  # fmt: skip
    return header, rows


def print_slurm_plan(spec: ClusterSpec, console: Console) -> None:
    """The Slurm side of `invoke plan`: accounts, limits and partitions, the Kubernetes plan's numbers. Never
    cut in a narrow terminal (`infra.tables.print_table`): a table where its words fit, otherwise one record
    per account and partition."""
    header, rows = slurm_plan_rows(spec)
    print_table(
        console,
        "Slurm accounts and limits (GPU units of each partition's GRES)",
        header,
        rows,
        justify=["right" if i in (2, 4, 6) else "left" for i in range(len(header))],
        key=2,
        heading=lambda row: f"account {row[0]}  partition {row[1]}",
    )
