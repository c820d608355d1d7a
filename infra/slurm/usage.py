"""`invoke usage` on a Slurm stack: allocated GPU-hours per team (its account and its borrow account) and pool
(partition), read from `sacct`.

A Slurm cluster has no Kueue and no Prometheus of gpufleet's; its accounting database already holds every job's
allocation. One `sacct` call lists the allocations of the window (sacct(1), Slurm 22.05):

- `-a -X`: every user's jobs, one line per allocation (no steps);
- `-D`: every record, also the run of a job that was preempted and requeued (without it sacct shows only the
  latest record of a job id, and a requeued job's earlier runs disappear as soon as it is eligible again);
- `-T -S START -E END`: each record's start and end truncated to the window, so `ElapsedRaw` is the seconds the
  allocation held its resources inside the window (running jobs: up to the window's end);
- `AllocTRES`: `gres/gpu=N` for every job that was given GPUs (gpufleet's slurm.conf counts `gres/gpu` in
  AccountingStorageTRES), `gres/shard=N` for shares of a time-sliced GPU.

GPU-hours are whole GPUs x hours: a MIG instance is 1/instances of a GPU, a shard 1/replicas, the same units as
the Prometheus report (`infra.monitoring.usage`). Quota GPU-hours are a team's guaranteed GPUs (`quotas`, its
account's GrpTRES) x the window's hours, so "quota used" above 100% is borrowing. Used and idle GPU-hours and
queue waits are not in Slurm's accounting and are left out, with a note.

The parsing and the sums are pure (`parse_sacct`, `usage_from_sacct` take sacct's text); `run_sacct` is the
one place a command runs.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infra.errors import ToolMissing
from infra.monitoring.usage import parse_until, parse_window
from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from scheduler.model import PoolView
from scheduler.slurm.policy import BORROW_SUFFIX, borrow_account

SACCT_FIELDS = ("jobid", "account", "partition", "qos", "state", "elapsedraw", "alloctres")
# sacct(1) time formats: YYYY-MM-DDTHH:MM:SS, in the local time zone of the sacct process (ours).
SACCT_TIME = "%Y-%m-%dT%H:%M:%S"
NOT_IN_SACCT = (
    "used and idle GPU-hours and queue waits are not in Slurm's accounting (no DCGM or Kueue metrics on a Slurm "
    "cluster): only allocated GPU-hours are reported"
)


@dataclass(frozen=True)
class Allocation:
    """One sacct record: a job's allocation (or one run of a requeued job), its seconds inside the window."""

    job: str
    account: str
    partition: str
    qos: str
    state: str  # the first word: "CANCELLED by 0" -> CANCELLED
    seconds: int
    tres: dict[str, int]

    @property
    def borrowed(self) -> bool:
        """Run under a borrow QOS (`<team>-borrow`): beyond the account's guaranteed GPUs, preemptible."""
        return self.qos.endswith(BORROW_SUFFIX)


@dataclass
class SlurmRow:
    name: str
    allocated_h: float = 0.0
    borrowed_h: float = 0.0  # of allocated_h: jobs under a borrow QOS
    preempted_h: float = 0.0  # of allocated_h: runs that ended PREEMPTED (requeued, their work redone)
    cost_usd: float | None = None
    quota_h: float = 0.0
    jobs: int = 0  # records with GPUs in the window

    @property
    def quota_utilisation(self) -> float | None:
        return self.allocated_h / self.quota_h if self.quota_h else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "allocated_gpu_hours": self.allocated_h,
            "borrowed_gpu_hours": self.borrowed_h,
            "preempted_gpu_hours": self.preempted_h,
            "cost_usd": self.cost_usd,
            "quota_gpu_hours": self.quota_h,
            "quota_utilisation": self.quota_utilisation,
            "jobs": self.jobs,
        }


@dataclass
class SlurmUsage:
    stack: str
    since: str
    start: float  # epoch seconds
    end: float
    teams: list[SlurmRow]
    pools: list[SlurmRow]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "source": "sacct",
            "since": self.since,
            "start": datetime.fromtimestamp(self.start, UTC).isoformat(),
            "end": datetime.fromtimestamp(self.end, UTC).isoformat(),
            "teams": [r.as_dict() for r in self.teams],
            "pools": [r.as_dict() for r in self.pools],
            "notes": self.notes,
        }


# -- parsing (pure) ------------------------------------------------------------------------------------------
def parse_tres(text: str) -> dict[str, int]:
    """`billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,mem=1G,node=1` -> the counted TRES (`mem` and other sized
    values are skipped: only GRES counts matter here)."""
    out: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if value.isdigit():
            out[name] = int(value)
    return out


def parse_sacct(text: str) -> list[Allocation]:
    """`sacct -P -n --format=<SACCT_FIELDS>` output, one Allocation per line."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) != len(SACCT_FIELDS):
            raise ValueError(f"sacct line {n}: expected {len(SACCT_FIELDS)} fields {SACCT_FIELDS}: {line!r}")
        job, account, partition, qos, state, elapsed, tres = cols
        out.append(
            Allocation(
                job=job,
                account=account,
                partition=partition,
                qos=qos,
                state=state.split(" ", 1)[0],
                seconds=max(0, int(elapsed or 0)),
                tres=parse_tres(tres),
            )
        )
    return out


def whole_gpus(alloc: Allocation, pool: PoolView | None) -> float:
    """The allocation's GPUs in whole GPUs: `gres/gpu` counts GPUs or, on a MIG pool, instances (1/instances
    of a GPU each); on a time-sliced pool each `gres/shard` is 1/replicas of a GPU."""
    gpus = float(alloc.tres.get("gres/gpu", 0))
    if pool is None:
        return gpus
    if pool.sharing == "mig":
        return gpus / (pool.mig_instances_per_gpu or 1)
    if pool.sharing == "timeSlicing":
        return gpus + alloc.tres.get("gres/shard", 0) / (pool.time_slicing_replicas or 1)
    return gpus


# -- the report (pure) ---------------------------------------------------------------------------------------
def usage_from_sacct(
    spec: ClusterSpec,
    text: str,
    since: str,
    start: float,
    end: float,
    prices: dict[str, float | None] | None = None,
) -> SlurmUsage:
    """GPU-hours per team and pool from sacct's text for the window [start, end]."""
    policy, views = scheduler_inputs(spec)
    pools_by_name = {v.name: v for v in views}
    prices = prices or {}
    hours = (end - start) / 3600
    teams = {t.name: SlurmRow(t.name) for t in policy.teams}
    pools = {v.name: SlurmRow(v.name) for v in views}
    for team in policy.teams:
        for pool, gpus in team.quotas.items():
            teams[team.name].quota_h += gpus * hours
            if pool in pools:
                pools[pool].quota_h += gpus * hours
    # a team's own account and its borrow account; the Slurm database keeps names in lower case
    team_of = {account.lower(): name for name in teams for account in (name, borrow_account(name))}
    others: dict[str, float] = {}
    off_pool: dict[str, float] = {}
    for alloc in parse_sacct(text):
        gpu_h = whole_gpus(alloc, pools_by_name.get(alloc.partition)) * alloc.seconds / 3600
        if gpu_h <= 0:
            continue
        owner = team_of.get(alloc.account.lower())
        rows = [r for r in (teams.get(owner or ""), pools.get(alloc.partition)) if r is not None]
        if owner is None:
            others[alloc.account] = others.get(alloc.account, 0.0) + gpu_h
        if alloc.partition not in pools:
            off_pool[alloc.partition] = off_pool.get(alloc.partition, 0.0) + gpu_h
        price = prices.get(alloc.partition)
        for row in rows:
            row.allocated_h += gpu_h
            row.jobs += 1
            if alloc.borrowed:
                row.borrowed_h += gpu_h
            if alloc.state == "PREEMPTED":
                row.preempted_h += gpu_h
            if price is not None:
                row.cost_usd = (row.cost_usd or 0.0) + gpu_h * price
    notes = [NOT_IN_SACCT]
    if others:
        notes.append("GPU-hours of accounts that are no team are in the pool rows only: " + _listed(others))
    if off_pool:
        notes.append(
            "GPU-hours in partitions that are no pool are in the team rows only: " + _listed(off_pool)
        )
    unpriced = sorted(p for p, price in prices.items() if price is None)
    if unpriced:
        notes.append(f"no price for pool(s) {', '.join(unpriced)}: give --price-file to cost them")
    return SlurmUsage(spec.stack, since, start, end, list(teams.values()), list(pools.values()), notes)


def _listed(hours: dict[str, float]) -> str:
    return ", ".join(f"{name or '(none)'} {h:.2f}" for name, h in sorted(hours.items()))


# -- running sacct -------------------------------------------------------------------------------------------
def sacct_argv(start: float, end: float, sacct: str = "sacct") -> list[str]:
    """The one sacct call (see the module docstring for each option)."""

    def local(t: float) -> str:
        return datetime.fromtimestamp(t).strftime(SACCT_TIME)

    return [sacct, "-a", "-X", "-D", "-T", "-P", "-n", "-S", local(start), "-E", local(end),
            "--format=" + ",".join(SACCT_FIELDS)]  # fmt: skip


def run_sacct(
    start: float, end: float, sacct: str = "sacct", env: Mapping[str, str] | None = None, timeout: float = 120
) -> str:
    """sacct's text for the window (`env`: the environment sacct runs in, default ours, where SLURM_CONF may name
    the cluster); a missing `sacct` or one that cannot reach the accounting is exit 3."""
    path = shutil.which(sacct, path=(env or os.environ).get("PATH"))
    if path is None:
        raise ToolMissing(
            f"{sacct} not found: run `invoke usage` for a Slurm stack on a host with the Slurm client "
            "(Debian: apt-get install slurm-client) and a slurm.conf of the cluster, or give --sacct PATH"
        )
    done = subprocess.run(
        [path, *sacct_argv(start, end, sacct)[1:]],
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise ToolMissing(
            f"{sacct} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}; it needs the "
            "cluster's slurm.conf (SLURM_CONF) and a reachable slurmdbd"
        )
    return done.stdout


def window(since: str, until: str) -> tuple[float, float]:
    """(start, end) in whole epoch seconds; a bad --since or --until is exit 2 (ConfigError)."""
    length = parse_window(since)
    end = math.floor(parse_until(until))
    return end - length, end


def slurm_usage(
    spec: ClusterSpec,
    since: str = "7d",
    until: str = "",
    sacct: str = "sacct",
    prices: dict[str, float | None] | None = None,
) -> SlurmUsage:
    start, end = window(since, until)
    return usage_from_sacct(spec, run_sacct(start, end, sacct), since, start, end, prices)


# -- output ------------------------------------------------------------------------------------------------
COLUMNS = (
    ("allocated GPU-h", "allocated_h", "{:.2f}"),
    ("borrowed GPU-h", "borrowed_h", "{:.2f}"),
    ("preempted GPU-h", "preempted_h", "{:.2f}"),
    ("cost USD", "cost_usd", "{:.2f}"),
    ("quota GPU-h", "quota_h", "{:.1f}"),
    ("quota used", "quota_utilisation", "{:.0%}"),
    ("jobs", "jobs", "{}"),
)


def print_usage(report: SlurmUsage, console: Any) -> None:
    """Both tables in the terminal's width, never cutting a value (infra.tables)."""
    from infra.tables import print_table

    span = (
        f"{datetime.fromtimestamp(report.start, UTC):%Y-%m-%d %H:%M} to "
        f"{datetime.fromtimestamp(report.end, UTC):%Y-%m-%d %H:%M UTC}"
    )
    for title, rows in (("team", report.teams), ("pool", report.pools)):
        print_table(
            console,
            f"{report.stack}: GPU allocation per {title} from sacct, {report.since} ({span})",
            [title, *(header for header, _, _ in COLUMNS)],
            [[row.name, *_cells(row)] for row in rows],
        )
    for note in report.notes:
        console.print(f"note: {note}")


def _cells(row: SlurmRow) -> Sequence[str]:
    values = ((getattr(row, attr), fmt) for _, attr, fmt in COLUMNS)
    return ["-" if v is None else fmt.format(v) for v, fmt in values]


def to_json(report: SlurmUsage) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"


def to_csv(report: SlurmUsage) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["kind", *SlurmRow("x").as_dict()])
    for kind, rows in (("team", report.teams), ("pool", report.pools)):
        for row in rows:
            writer.writerow([kind, *("" if v is None else v for v in row.as_dict().values())])
    return out.getvalue()
