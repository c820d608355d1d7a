"""The Slurm side of `invoke plan`: accounts, limits and partitions, with the Kubernetes plan's numbers."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from infra.tables import print_table
from scheduler.slurm import team_limits
from scheduler.slurm.policy import borrow_qos

TITLE = "Slurm accounts and limits (GPU units of each partition's GRES)"
HEAD = ["account", "partition", "nodes", "TRES", "guaranteed (GrpTRES)", "borrow QOS", "borrowable"]
_KEYS = ["account", "partition", "nodes", "tres", "guaranteed", "borrow_qos", "borrowable"]


def slurm_accounts(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Per account and partition: its nodes, the TRES its limits count, the guaranteed GrpTRES and the borrow
    QOS's (plan.json's `slurm`)."""
    policy, pools = scheduler_inputs(spec)
    hosts = {p.name: len(p.hosts or ()) for p in spec.node_pools}
    return [
        dict(zip(_KEYS, [lim.team, lim.pool, hosts[lim.pool], lim.tres, lim.guaranteed, borrow_qos(lim.team),
                         lim.borrowable], strict=True))
        for lim in team_limits(policy, pools)
    ]  # fmt: skip


def slurm_rows(accounts: list[dict[str, Any]]) -> list[list[str]]:
    """The accounts as the plan's table rows (and plan.md's)."""
    return [[str(account[key]) for key in _KEYS] for account in accounts]


def slurm_plan_rows(spec: ClusterSpec) -> tuple[list[str], list[list[str]]]:
    """The plan's Slurm table: per account and partition, the guaranteed GrpTRES and the borrow QOS's."""
    return HEAD, slurm_rows(slurm_accounts(spec))


def print_accounts(accounts: list[dict[str, Any]], console: Console) -> None:
    """The Slurm side of `invoke plan`: accounts, limits and partitions, the Kubernetes plan's numbers. Never
    cut in a narrow terminal (`infra.tables.print_table`): a table where its words fit, otherwise one record
    per account and partition."""
    print_table(
        console,
        TITLE,
        HEAD,
        slurm_rows(accounts),
        justify=["right" if i in (2, 4, 6) else "left" for i in range(len(HEAD))],
        key=2,
        heading=lambda row: f"account {row[0]}  partition {row[1]}",
    )


def print_slurm_plan(spec: ClusterSpec, console: Console) -> None:
    """`print_accounts` of the stack's accounts."""
    print_accounts(slurm_accounts(spec), console)
