"""A team's GPU limits and their use: the accounts' and QOS' GrpTRES from `sacctmgr`, the live use from
`scontrol show assoc_mgr`.

`sacctmgr -nP show assoc format=account,user,grptres` and `sacctmgr -nP show qos format=name,grptres`
(sacctmgr(1) of Slurm 22.05, "LIST/SHOW ASSOCIATION FORMAT OPTIONS", "GrpTRES"; `-n` no header, `-P` `|`
between fields) give the limits slurmdbd holds: `gres/gpu:h100=2,gres/gpu=2` on the team's account (its
guarantee) and on the team's borrow QOS (its borrowing allowance), as `scheduler.slurm.accounting` writes them.

`scontrol -o show assoc_mgr accounts=A flags=assoc` and `flags=qos` (scontrol(1) "show assoc_mgr") give
slurmctld's own view, one record a line, each TRES as `limit(used)`, `N` for no limit
(SchedMD/slurm@slurm-22-05-8-1 src/scontrol/info_assoc_mgr.c `_print_tres_line`). Under PrivateData=usage a
user who is neither an operator nor a coordinator of the account gets only the associations of their own user,
not the account's (src/common/assoc_mgr.c `assoc_mgr_info_get_pack_msg`), so the team's use is then theirs
alone; QOS records are never hidden.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

ASSOC_FORMAT = "format=account,user,grptres"
QOS_FORMAT = "format=name,grptres"


def tres_map(value: str) -> dict[str, int]:
    """`gres/gpu:h100=2,gres/gpu=2` -> {"gres/gpu:h100": 2, "gres/gpu": 2}."""
    out: dict[str, int] = {}
    for item in value.split(","):
        name, _, number = item.partition("=")
        if name and number.isdigit():
            out[name] = int(number)
    return out


@dataclass(frozen=True)
class AccountLimits:
    account: str
    grp_tres: dict[str, int]  # the account association's GrpTRES (its users' rows carry none of their own)


def parse_assoc(text: str) -> dict[str, AccountLimits]:
    """Account -> its account-level association's GrpTRES, from `sacctmgr -nP show assoc ASSOC_FORMAT`."""
    out: dict[str, AccountLimits] = {}
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or cells[1]:  # a user's association: the account's row holds the team's limit
            continue
        out[cells[0]] = AccountLimits(cells[0], tres_map(cells[2]))
    return out


def parse_qos(text: str) -> dict[str, dict[str, int]]:
    """QOS name -> its GrpTRES, from `sacctmgr -nP show qos QOS_FORMAT`."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) >= 2 and cells[0]:
            out[cells[0]] = tres_map(cells[1])
    return out


_GRP_TRES = re.compile(r"(?:^| )GrpTRES=(\S*)")
_ITEM = re.compile(r"([^,=]+)=(N|\d+)\((\d+)\)")


@dataclass(frozen=True)
class LiveRecord:
    """One association (`user` "" for the account's own) or QOS (`account` the QOS name) as slurmctld holds
    it: per TRES its limit (None: none) and what running jobs use."""

    kind: str  # "assoc" or "qos"
    account: str
    user: str
    limits: dict[str, int | None]
    used: dict[str, int]


def parse_assoc_mgr(text: str) -> list[LiveRecord]:
    """The records of `scontrol -o show assoc_mgr ... flags=assoc|qos` (headers skipped)."""
    out = []
    for line in text.splitlines():
        grp = _GRP_TRES.search(line)
        if not grp:
            continue
        limits: dict[str, int | None] = {}
        used: dict[str, int] = {}
        for name, limit, in_use in _ITEM.findall(grp.group(1)):
            limits[name] = None if limit == "N" else int(limit)
            used[name] = int(in_use)
        if line.startswith("QOS="):
            name = line.split()[0].removeprefix("QOS=").split("(")[0]
            out.append(LiveRecord("qos", name, "", limits, used))
            continue
        fields = dict(re.findall(r"(?:^| )(Account|UserName)=(\S*)", line))
        user = fields.get("UserName", "").split("(")[0]
        out.append(LiveRecord("assoc", fields.get("Account", ""), user, limits, used))
    return out


@dataclass(frozen=True)
class Use:
    """What a team's account holds now, per TRES; `whole`: the account's own record was readable (else only
    the caller's own associations were, and `used` is theirs)."""

    used: Mapping[str, int]
    whole: bool


def account_use(records: list[LiveRecord], account: str) -> Use:
    mine = [r for r in records if r.kind == "assoc" and r.account == account]
    top = next((r for r in mine if not r.user), None)
    if top is not None:
        return Use(top.used, True)
    total: dict[str, int] = {}
    for r in mine:
        for name, n in r.used.items():
            total[name] = total.get(name, 0) + n
    return Use(total, False)


def qos_use(records: list[LiveRecord], qos: str) -> dict[str, int]:
    return next((dict(r.used) for r in records if r.kind == "qos" and r.account == qos), {})


def partition_tres(sinfo: str) -> dict[str, str]:
    """Partition -> the TRES a team's limit there is counted in, from `sinfo --noheader --format=%R|%G`
    (sinfo(1): %R partition name, %G generic resources): `gpu:h100:2` -> gres/gpu:h100; a partition whose nodes
    have `shard`s is time-sliced and counted in gres/shard (`scheduler.slurm.policy.tres_name`)."""
    out: dict[str, str] = {}
    for line in sinfo.splitlines():
        partition, _, gres = line.strip().partition("|")
        if not partition or partition in out:
            continue
        items = [g.split("(")[0] for g in gres.split(",") if g and g != "(null)"]
        if any(i.startswith("shard") for i in items):
            out[partition] = "gres/shard"
        elif gpus := [i.split(":") for i in items if i.startswith("gpu:")]:
            out[partition] = f"gres/gpu:{gpus[0][1]}" if len(gpus[0]) > 2 else "gres/gpu"
    return out


@dataclass(frozen=True)
class PartitionRow:
    """A team in one partition, in the partition's GPU units (GPUs, MIG instances or shards)."""

    partition: str
    tres: str
    quota: int | None  # the team account's GrpTRES (None: no limit)
    used: int  # what the team's account holds (the caller's share only where `whole` is False)
    whole: bool
    borrow_limit: int | None  # the team's borrow QOS GrpTRES
    borrowed: int  # what its borrowed jobs hold

    @property
    def maximum(self) -> int | None:
        if self.quota is None or self.borrow_limit is None:
            return None
        return self.quota + self.borrow_limit


def team_rows(
    team: str,
    partitions: Mapping[str, str],
    accounts: Mapping[str, AccountLimits],
    qos: Mapping[str, dict[str, int]],
    live: list[LiveRecord],
    borrow: str,
) -> list[PartitionRow]:
    """The team's rows: its account's limits and use, its borrow QOS's (named `borrow`) limits and use."""
    limits = accounts[team].grp_tres if team in accounts else {}
    use = account_use(live, team)
    borrowed = qos_use(live, borrow)
    return [
        PartitionRow(
            partition,
            tres,
            limits.get(tres),
            use.used.get(tres, 0),
            use.whole,
            qos.get(borrow, {}).get(tres),
            borrowed.get(tres, 0),
        )
        for partition, tres in sorted(partitions.items())
    ]
