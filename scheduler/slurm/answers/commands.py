"""`quota`, `queue`, `why` and `eta` on a Slurm cluster: read with the caller's identity, explain with the pure
rooms, return the text to print. Each is one function of (slurm, ...) shared by `gpufleet-slurm` and the
`invoke` tasks.

A team is a pair of accounts, `TEAM` and `TEAM-borrow` (`scheduler.slurm.accounting` creates both), the second
one's jobs running on borrowed, preemptible GPUs under the QOS of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.explain.cluster import ClusterError
from scheduler.slurm.answers import texts
from scheduler.slurm.answers.job import JobStory, parse_job
from scheduler.slurm.answers.limits import (
    ASSOC_FORMAT,
    QOS_FORMAT,
    PartitionRow,
    parse_assoc,
    parse_assoc_mgr,
    parse_qos,
    partition_tres,
    team_rows,
)
from scheduler.slurm.answers.reader import Slurm
from scheduler.slurm.answers.reasons import explain
from scheduler.slurm.answers.sprio import parse_sprio, sprio_argv
from scheduler.slurm.answers.squeue import QueuedJob, parse_squeue, positions, squeue_argv
from scheduler.slurm.policy import BORROW_SUFFIX, borrow_account, borrow_qos


@dataclass(frozen=True)
class Team:
    name: str
    rows: list[PartitionRow]

    @property
    def accounts(self) -> tuple[str, str]:
        return self.name, borrow_account(self.name)


def team_of(account: str) -> str:
    return account.removesuffix(BORROW_SUFFIX)


def _assoc_rows(slurm: Slurm) -> list[list[str]]:
    return [ln.split("|") for ln in slurm.run("sacctmgr", "-nP", "show", "assoc", ASSOC_FORMAT).splitlines()]


def choose_team(slurm: Slurm, account: str) -> str:
    """The team `--account` names (its own or its -borrow account), else the one team the caller is a user of.
    Bad input is one line naming `--account`, exit 2."""
    rows = _assoc_rows(slurm)
    names = {r[0] for r in rows if r and r[0]}
    teams = sorted(a for a in names if borrow_account(a) in names)
    if account:
        if team_of(account) not in teams:
            raise ClusterError(
                f"--account {account}: not a team's account; teams: {', '.join(teams) or 'none'}", 2
            )
        return team_of(account)
    me = slurm.user()
    mine = sorted({team_of(r[0]) for r in rows if len(r) > 1 and r[1] == me} & set(teams))
    if len(mine) != 1:
        which = f"you are a user of {', '.join(mine)}" if mine else f"user {me} is in no team's account"
        raise ClusterError(f"--account: name your team's account ({which}; teams: {', '.join(teams)})", 2)
    return mine[0]


def read_team(slurm: Slurm, team: str) -> Team:
    accounts = parse_assoc(slurm.run("sacctmgr", "-nP", "show", "assoc", ASSOC_FORMAT))
    qos = parse_qos(slurm.run("sacctmgr", "-nP", "show", "qos", QOS_FORMAT))
    names = f"accounts={team},{borrow_account(team)}"
    live = parse_assoc_mgr(slurm.run("scontrol", "-o", "show", "assoc_mgr", names, "flags=assoc"))
    live += parse_assoc_mgr(
        slurm.run("scontrol", "-o", "show", "assoc_mgr", f"qos={borrow_qos(team)}", "flags=qos")
    )
    partitions = partition_tres(slurm.run("sinfo", "--noheader", "--format=%R|%G"))
    return Team(team, team_rows(team, partitions, accounts, qos, live, borrow_qos(team)))


def quota(slurm: Slurm, account: str = "") -> str:
    """The team's quota, use, borrowing allowance and borrowed GPUs per partition."""
    team = read_team(slurm, choose_team(slurm, account))
    return texts.quota_text(team.name, team.rows)


def asks_of(job: QueuedJob) -> dict[str, int]:
    """squeue's %b, `gres:gpu:h100:2` or `gres:shard:2` per node, times its nodes (%D), as TRES counts."""
    out: dict[str, int] = {}
    for item in job.gres.split(","):
        parts = item.removeprefix("gres:").split(":")
        if len(parts) >= 2 and parts[-1].isdigit():
            out["gres/" + ":".join(parts[:-1])] = int(parts[-1]) * job.nodes
    return out


def _explain_queued(job: QueuedJob, team: Team) -> texts.Answer:
    return explain(job.state, job.reason, job.partition, job.account, asks_of(job), team.rows,
                   borrowed=job.account == borrow_account(team.name))  # fmt: skip


def pending(slurm: Slurm) -> list[QueuedJob]:
    """Every pending job the caller may see (PrivateData=jobs: their own, or their accounts' as coordinator)."""
    return parse_squeue(slurm.run(*squeue_argv(states="PENDING")))


def queue(slurm: Slurm, account: str = "") -> str:
    """The team's pending jobs in slurmctld's order per partition, each with its reason in the team's terms."""
    team = read_team(slurm, choose_team(slurm, account))
    jobs = pending(slurm)
    places = positions(jobs)
    mine = [j for j in jobs if j.account in team.accounts]
    mine.sort(key=lambda j: (j.partition, places.get(j.job_id, 0)))
    return texts.queue_text(team.name, [(j, _explain_queued(j, team)) for j in mine], places)


def read_job(slurm: Slurm, job_id: str) -> JobStory:
    if not job_id.replace("_", "").isdigit():
        raise ClusterError(f"JOB {job_id!r}: a Slurm job id is a number (squeue shows yours)", 2)
    try:
        return parse_job(slurm.run("scontrol", "-o", "show", "job", job_id))
    except ClusterError as exc:
        if "Invalid job id" in str(exc):
            raise ClusterError(f"JOB {job_id}: no such job, or not one you may see", 2) from None
        raise


def why(slurm: Slurm, job_id: str) -> str:
    """One job's story: its reason in its team's terms, its place in line, its priority's factors."""
    job = read_job(slurm, job_id)
    team = read_team(slurm, team_of(job.account))
    a = explain(job.state, job.reason, job.partition, job.account, job.tres, team.rows, job.restarts,
                job.dependency, borrowed=job.account == borrow_account(team.name))  # fmt: skip
    place = positions(pending(slurm)).get(job.job_id) if job.state == "PENDING" else None
    factors = parse_sprio(slurm.run(*sprio_argv(job.job_id))) if job.state == "PENDING" else []
    return texts.why_text(job, a, place, factors[0] if factors else None)


def eta(slurm: Slurm, job_id: str, now: datetime | None = None) -> str:
    """When a pending job starts: squeue --start's StartTime, with what the backfill scheduler assumed."""
    story = read_job(slurm, job_id)
    team = read_team(slurm, team_of(story.account))
    found = parse_squeue(slurm.run(*squeue_argv(start=story.state == "PENDING"), f"--jobs={story.job_id}"))
    job = next((j for j in found if j.job_id == story.job_id), None)
    if job is None:
        return f"job {story.job_id}: {story.state.lower()}"
    a = explain(job.state, job.reason, job.partition, job.account, story.tres, team.rows, story.restarts,
                story.dependency, borrowed=job.account == borrow_account(team.name))  # fmt: skip
    running = parse_squeue(slurm.run(*squeue_argv(accounts=team.accounts, states="RUNNING")))
    ends = [j.end for j in running if j.end and j.partition == job.partition]
    return texts.eta_text(job, a, now or datetime.now(), ends)
