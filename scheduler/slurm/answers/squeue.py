"""`squeue` with a `|`-separated `--format`, parsed: the jobs a caller may see, and `--start`'s estimates.

Fields (squeue(1) of Slurm 22.05, SchedMD/slurm@slurm-22-05-8-1 doc/man/man1/squeue.1, "-o <output_format>"):
%i job id, %a account, %u user, %P partition, %q QOS, %T state (extended form), %r reason (JOB REASON CODES),
%S actual or expected start time, %e time the job ended or is expected to end (from its time limit), %l time
limit, %Q priority (an integer), %V submission time, %D nodes (allocated, or the least a pending job asks), and %b the GPUs per node it asked (`gres:gpu:h100:1`; a
"vestigial option" of squeue: src/squeue/opts.c `job_format_add_tres_per_node`). `--start` adds `--sort=S`
and `--states=PENDING`; "the expected start time of pending jobs is only available if the Slurm is configured
to use the backfill scheduling plugin" (squeue(1) --start; slurm.conf(5) SchedulerType defaults to
sched/backfill). Times are the controller's local time, printed as `YYYY-MM-DDTHH:MM:SS`; `N/A`, `Unknown`
and `None` mean none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

FIELDS = ("%i", "%a", "%u", "%P", "%q", "%T", "%r", "%S", "%e", "%l", "%Q", "%V", "%b", "%D")
FORMAT = "|".join(FIELDS)
NO_TIME = ("N/A", "Unknown", "None", "")
# Pending jobs slurmctld leaves out of its job queue: held (priority 0) or waiting for a dependency or a begin
# time (SchedMD/slurm@slurm-22-05-8-1 src/slurmctld/job_scheduler.c `_job_runnable_test1`: `job_independent`,
# `priority == 0`); they have no place in line until that changes.
NOT_QUEUED = ("Dependency", "DependencyNeverSatisfied", "JobHeldUser", "JobHeldAdmin", "BeginTime")


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    account: str
    user: str
    partition: str
    qos: str
    state: str
    reason: str
    start: datetime | None  # expected start of a pending job (backfill's estimate), actual of a running one
    end: datetime | None  # expected end of a running job, from its time limit
    time_limit: str
    priority: int
    submitted: datetime | None
    gres: str  # what it asks per node, e.g. gres:gpu:h100:1 ("N/A" when none)
    nodes: int


def squeue_argv(accounts: Sequence[str] = (), start: bool = False, states: str = "") -> list[str]:
    """The squeue command line; `start`: pending jobs with the backfill scheduler's expected start times."""
    argv = ["squeue", "--noheader", f"--format={FORMAT}"]
    if start:
        argv.append("--start")
    if states:
        argv.append(f"--states={states}")
    if accounts:
        argv.append(f"--account={','.join(accounts)}")
    return argv


def slurm_time(value: str) -> datetime | None:
    value = value.strip()
    return None if value in NO_TIME else datetime.fromisoformat(value)


def parse_squeue(text: str) -> list[QueuedJob]:
    """One QueuedJob per line of `squeue --noheader --format=FORMAT`; a line of another shape is an error."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(FIELDS):
            raise ValueError(f"squeue printed a line of {len(cells)} fields, not {len(FIELDS)}: {line!r}")
        (job_id, account, user, partition, qos, state, reason,
         start, end, limit, prio, submitted, gres, nodes) = cells  # fmt: skip
        jobs.append(QueuedJob(job_id, account, user, partition, qos, state, reason, slurm_time(start),
                              slurm_time(end), limit, int(prio) if prio.isdigit() else 0, slurm_time(submitted),
                              gres, int(nodes) if nodes.isdigit() else 1))  # fmt: skip
    return jobs


def scheduling_order(jobs: Sequence[QueuedJob]) -> list[QueuedJob]:
    """Pending jobs in the order slurmctld tries them within a partition: higher priority first, then the
    earlier submitted, then the lower job id (SchedMD/slurm@slurm-22-05-8-1 src/slurmctld/job_scheduler.c
    `sort_job_queue2`; reservations, partition tiers and preemption checks come before it and are not used by
    the stacks gpufleet renders). Jobs not in slurmctld's queue (`NOT_QUEUED`) are left out."""
    pending = [j for j in jobs if j.state == "PENDING" and j.reason.split(",")[0] not in NOT_QUEUED]
    far = datetime.max
    return sorted(pending, key=lambda j: (-j.priority, j.submitted or far, _id(j.job_id)))


def _id(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0]
    return (int(head) if head.isdigit() else 0, job_id)


def positions(jobs: Sequence[QueuedJob]) -> dict[str, int]:
    """Each pending job's place in its partition's line (0 is next), among `jobs`."""
    out: dict[str, int] = {}
    seen: dict[str, int] = {}
    for job in scheduling_order(jobs):
        out[job.job_id] = seen.get(job.partition, 0)
        seen[job.partition] = out[job.job_id] + 1
    return out
