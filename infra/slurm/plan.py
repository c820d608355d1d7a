"""The Slurm side of `invoke plan`: accounts, limits and partitions, with the Kubernetes plan's numbers."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from infra.tables import print_table
from scheduler.slurm import team_limits
from scheduler.slurm.policy import GPU_TRES, borrow_account

TITLE = "Slurm accounts and limits (GPU units of each partition's GRES)"
HEAD = ["account", "partition", "nodes", "TRES", "guaranteed (GrpTRES)", "borrow account", "borrowable"]
_KEYS = ["account", "partition", "nodes", "tres", "guaranteed", "borrow_account", "borrowable"]


def slurm_accounts(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Per account and partition: its nodes, the TRES its limits count, the guaranteed GrpTRES and the borrow
    account's (its QOS's); then per account the untyped `gres/gpu` limit of every partition (partition "any"),
    which counts the GPU requests that name no type (plan.json's `slurm`)."""
    policy, pools = scheduler_inputs(spec)
    hosts = {p.name: len(p.hosts or ()) for p in spec.node_pools}
    limits = team_limits(policy, pools)
    accounts: list[dict[str, Any]] = []
    for team in policy.teams:
        mine = [lim for lim in limits if lim.team == team.name]
        accounts += [
            dict(zip(_KEYS, [lim.team, lim.pool, hosts[lim.pool], lim.tres, lim.guaranteed,
                             borrow_account(lim.team), lim.borrowable], strict=True))
            for lim in mine
        ]  # fmt: skip
        gpus = [lim for lim in mine if lim.tres.startswith(GPU_TRES + ":")]
        if gpus:
            accounts.append(dict(zip(_KEYS, [team.name, "any", sum(hosts.values()), GPU_TRES,
                                             sum(lim.guaranteed for lim in gpus), borrow_account(team.name),
                                             sum(lim.borrowable for lim in gpus)], strict=True)))  # fmt: skip
    return accounts


def slurm_rows(accounts: list[dict[str, Any]]) -> list[list[str]]:
    """The accounts as the plan's table rows (and plan.md's)."""
    return [[str(account[key]) for key in _KEYS] for account in accounts]


def slurm_plan_rows(spec: ClusterSpec) -> tuple[list[str], list[list[str]]]:
    """The plan's Slurm table: per account and partition, the guaranteed GrpTRES and the borrow account's."""
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
