"""The printed answers, built from the parsed Slurm state: the same shapes as `kubectl gpufleet` prints."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from scheduler.explain.answer import Answer
from scheduler.slurm.answers.job import JobStory
from scheduler.slurm.answers.limits import PartitionRow
from scheduler.slurm.answers.sprio import PriorityFactors
from scheduler.slurm.answers.squeue import QueuedJob

PRIVATE_USE = ("IN USE counts your own jobs only: Slurm hides the team's total from members here "
               "(PrivateData=usage); a coordinator of the account sees it")  # fmt: skip
POSITIONS = "0 is next; among the pending jobs of the partition you may see; -: not in line yet"


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=False)).rstrip()
                     for line in [header, *rows])  # fmt: skip


def quota_text(team: str, rows: Sequence[PartitionRow]) -> str:
    header = ("PARTITION", "TRES", "QUOTA", "IN USE", "BORROW LIMIT", "BORROWED", "MAX")
    body = [(r.partition, r.tres, _n(r.quota), str(r.used), _n(r.borrow_limit), str(r.borrowed), _n(r.maximum))
            for r in rows]  # fmt: skip
    lines = [f"account {team}: GPUs per partition (MAX: quota + borrowing allowance; -: no limit)",
             table(header, body)]  # fmt: skip
    if rows and not all(r.whole for r in rows):
        lines.append(f"({PRIVATE_USE})")
    return "\n".join(lines)


def queue_text(team: str, waiting: Sequence[tuple[QueuedJob, Answer]], places: dict[str, int]) -> str:
    if not waiting:
        return f"account {team}: nothing waiting"
    lines = [f"account {team}: {len(waiting)} waiting ({POSITIONS})"]
    for job, a in waiting:
        lines.append(f"{places.get(job.job_id, '-')!s:>3}  job {job.job_id} ({job.partition}, account {job.account}, "
                     f"qos {job.qos})  priority {job.priority}  [{a.reason.value}] {a.says}")  # fmt: skip
        if a.to_start:
            lines.append(f"     to start: {a.to_start}")
    return "\n".join(lines)


def why_text(job: JobStory, a: Answer, place: int | None, factors: PriorityFactors | None) -> str:
    asks = ",".join(f"{k}={v}" for k, v in job.gpus().items()) or "no GPUs"
    lines = [f"job {job.job_id} ({job.name}): account {job.account}, partition {job.partition}, qos {job.qos}, "
             f"{job.state}",
             f"  reason:   [{a.reason.value}] {a.says}"]  # fmt: skip
    if a.to_start:
        lines.append(f"  to start: {a.to_start}")
    if place is not None:
        lines.append(f"  position: {place} in partition {job.partition} ({POSITIONS})")
    lines.append(f"  {factors.says()}" if factors else f"  priority {job.priority}")
    lines.append(
        f"  asks: {asks}; time limit {job.time_limit}"
        + (f"; requeued {job.restarts}x" if job.restarts else "")
    )
    if job.state == "PENDING" and job.start:
        lines.append(f"  expected start: {job.start.isoformat()}" + (f" on {job.nodes}" if job.nodes else ""))
    elif job.nodes:
        lines.append(f"  nodes: {job.nodes}" + (f" since {job.start.isoformat()}" if job.start else ""))
    lines.append(f"  Slurm: JobState={job.state} Reason={job.reason}"
                 + (f" Dependency={job.dependency}" if job.dependency else ""))  # fmt: skip
    return "\n".join(lines)


BACKFILL_ASSUMES = (
    "every running job runs until its time limit (--time; the partition's DefaultTime or MaxTime when it gave "
    "none), so a job that ends early brings the start forward",
    "the jobs ahead of it start first and no job of higher priority is submitted meanwhile; preemption of "
    "borrowed work is not planned",
)


def eta_text(job: QueuedJob, a: Answer, now: datetime, team_ends: Sequence[datetime]) -> str:
    """`--start`'s estimate with what the backfill scheduler assumed, or why there is none."""
    head = f"job {job.job_id} ({job.partition}, account {job.account})"
    if a.to_start == "" and job.state != "PENDING":
        return f"{head}: {job.state.lower()}" + (f" since {job.start.isoformat()}" if job.start else "")
    if job.start is not None:
        wait = max(0, round((job.start - now).total_seconds() / 60))
        lines = [f"{head}: expected start {job.start.isoformat()} (in {wait} min), Slurm's backfill estimate",
                 *(f"  assumed: {s}" for s in BACKFILL_ASSUMES)]  # fmt: skip
    else:
        lines = [f"{head}: no start time from Slurm yet: [{a.reason.value}] {a.says}",
                 "  the backfill scheduler plans only jobs that limits let start, and runs every bf_interval "
                 "(30 s unless the site sets SchedulerParameters)"]  # fmt: skip
        if team_ends:
            lines.append(f"  not before {min(team_ends).isoformat()}: the earliest time limit of your team's "
                         f"{len(team_ends)} running job(s) you may see")  # fmt: skip
    lines.append(f"  now: {now.isoformat(timespec='seconds')} (the controller's local time)")
    return "\n".join(lines)
