"""The Slurm side of `invoke plan`: accounts, limits and partitions, with the Kubernetes plan's numbers."""

from __future__ import annotations

from rich.console import Console

from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from infra.tables import print_table
from scheduler.slurm import team_limits
from scheduler.slurm.policy import GPU_TRES, borrow_account


def slurm_plan_rows(spec: ClusterSpec) -> tuple[list[str], list[list[str]]]:
    """The plan's Slurm table: per account and partition, the guaranteed GrpTRES and the borrow account's (its
    QOS's); then per account the untyped `gres/gpu` limit of every partition ("any"), which counts the GPU
    requests that name no type."""
    policy, pools = scheduler_inputs(spec)
    header = ["account", "partition", "nodes", "TRES", "guaranteed (GrpTRES)", "borrow account", "borrowable"]
    hosts = {p.name: len(p.hosts or ()) for p in spec.node_pools}
    limits = team_limits(policy, pools)
    rows = []
    for team in policy.teams:
        mine = [lim for lim in limits if lim.team == team.name]
        rows += [[lim.team, lim.pool, str(hosts[lim.pool]), lim.tres, str(lim.guaranteed),
                  borrow_account(lim.team), str(lim.borrowable)] for lim in mine]  # fmt: skip
        gpus = [lim for lim in mine if lim.tres.startswith(GPU_TRES + ":")]
        if gpus:
            rows.append([team.name, "any", str(sum(hosts.values())), GPU_TRES,
                         str(sum(lim.guaranteed for lim in gpus)), borrow_account(team.name),
                         str(sum(lim.borrowable for lim in gpus))])  # fmt: skip
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
