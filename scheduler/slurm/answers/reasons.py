"""Why a Slurm job waits, in the team's terms: its Reason code, the team's limits and use, its place in line.

The codes are Slurm 22.05's (SchedMD/slurm@slurm-22-05-8-1 src/common/slurm_protocol_defs.c
`job_reason_string`), documented in squeue(1) "JOB REASON CODES" (doc/man/man1/squeue.1) and, for the limits,
resource_limits.html "Job Reason Codes" (doc/html/resource_limits.shtml). The answers use the same reasons as
the Kubernetes side (`scheduler.explain.answer.Reason`), so a team reads one vocabulary on either
orchestrator:

- `Resources` ("waiting for resources to become available"): the team is within its limit but no node of the
  partition has the job's GPUs free together now: Fragmentation (or simply a full partition);
- `Priority` ("one or more higher priority jobs exist for this partition"): BehindHigherPriority;
- `AssocGrpGRES`, `AssocGrpGRESRunMinutes` (the association "has reached its aggregate GRES limit") on the
  team's account: QuotaInUse, or OverTeamLimit when the job alone asks more than the team's guarantee;
- `QOSGrpGRES` on the team's borrow QOS ("the job's QOS has reached its aggregate GRES limit"): the borrowing
  allowance is in use: QuotaInUse, or OverTeamLimit when the job asks more than the allowance;
- `AssocMaxGRESPerJob`, `QOSMaxGRESPerJob`, `PartitionTimeLimit`: OverTeamLimit (it cannot start as it is);
- `Dependency`, `DependencyNeverSatisfied`: WaitingForDependency;
- `ReqNodeNotAvail`, `NodeDown`, `PartitionDown`: WaitingForNodes (a node it needs is down, drained,
  reserved or not responding);
- `JobHeldUser`, `JobHeldAdmin`: Deactivated (held; `scontrol release`);
- `BeginTime`: not before its `--begin` time (a requeued job is held back briefly: BeginTime as well);
- a running, completing or finished job: Running or Finished.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.explain.answer import Answer, Reason
from scheduler.slurm.answers.limits import PartitionRow

GRES_LIMIT = ("AssocGrpGRES", "AssocGrpGRESRunMinutes", "AssocGrpGRESMinutes")
QOS_GRES_LIMIT = ("QOSGrpGRES", "QOSGrpGRESRunMinutes", "QOSGrpGRESMinutes")
PER_JOB_LIMIT = ("AssocMaxGRESPerJob", "QOSMaxGRESPerJob", "AssocMaxGRESPerNode", "QOSMaxGRESPerNode")
NODES = ("ReqNodeNotAvail", "NodeDown", "PartitionDown", "PartitionInactive", "PartitionNodeLimit")
RUNNING = ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED")
DONE = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
        "DEADLINE")  # fmt: skip


def _row(rows: Sequence[PartitionRow], partition: str) -> PartitionRow | None:
    return next((r for r in rows if r.partition == partition), None)


def _n(value: int | None) -> str:
    return "no limit" if value is None else str(value)


def _team_limit(row: PartitionRow | None, asks: int, borrowed: bool, partition: str) -> Answer:
    """The team's account (or, for a borrowed job, its borrow QOS) is at its GrpTRES on the partition's GPUs."""
    if row is None:
        return Answer(Reason.QUOTA, f"your team's GPU limit in partition {partition} is in use",
                      "wait for your team's running jobs to end")  # fmt: skip
    limit, used = (row.borrow_limit, row.borrowed) if borrowed else (row.quota, row.used)
    what = "borrowing allowance" if borrowed else "quota"
    if limit is not None and asks > limit:
        return Answer(
            Reason.OVER_LIMIT,
            f"it asks {asks} {row.tres} in partition {partition}, more than your team's {what} there ({limit})",
            "ask for fewer GPUs, or another partition; or ask the platform team for more quota"
            + ("" if borrowed else "; or submit under your team's -borrow account to run on idle GPUs"),
        )
    holds = f"your team uses {used} of its {_n(limit)} {row.tres} {what} in partition {partition}"
    if not (row.whole or borrowed):  # PrivateData=usage: the caller's own use only
        holds = (f"your team's {_n(limit)} {row.tres} {what} in partition {partition} is in use (your own jobs "
                 f"hold {used}; Slurm keeps the team's total private)")  # fmt: skip
    to_start = "wait for your team's running jobs to end"
    if not borrowed and row.borrow_limit:
        to_start += "; or resubmit under your team's -borrow account to run on idle GPUs (preemptible)"
    return Answer(
        Reason.QUOTA,
        f"{holds}; {asks} more needed",
        to_start,
    )


def explain(
    state: str,
    reason: str,
    partition: str,
    account: str,
    asks: Mapping[str, int],
    rows: Sequence[PartitionRow],
    restarts: int = 0,
    dependency: str = "",
    borrowed: bool = False,
) -> Answer:
    """One job's reason in the team's terms; `rows` are its team's partition rows, `asks` its TRES request,
    `borrowed`: it runs under the team's borrow account."""
    if state in DONE:
        return Answer(Reason.FINISHED, f"finished ({state})", "")
    if state in RUNNING:
        return Answer(Reason.RUNNING, f"{state.lower()}", "")
    row = _row(rows, partition)
    gpus = asks.get(row.tres, 0) if row else 0
    code = reason.split(",")[0]
    requeued = f"requeued {restarts} time(s) (preempted or its node failed); " if restarts else ""
    if code in GRES_LIMIT or code in QOS_GRES_LIMIT:
        a = _team_limit(row, gpus, borrowed or code in QOS_GRES_LIMIT, partition)
        return Answer(a.reason, requeued + a.says, a.to_start)
    if code in PER_JOB_LIMIT or code == "PartitionTimeLimit":
        return Answer(Reason.OVER_LIMIT, f"{requeued}it asks more than a job may ({code})",
                      "ask for fewer GPUs or a shorter --time; it cannot start as it is")  # fmt: skip
    if code == "Priority":
        return Answer(Reason.PRIORITY, f"{requeued}jobs of higher priority wait ahead of it in partition {partition}",
                      "wait for them, or submit with a higher --qos (priority class) if the work is more urgent")  # fmt: skip
    if code == "Resources":
        free = (
            f"; your team is within its limit ({row.used} of {_n(row.quota)} {row.tres})"
            if row and not borrowed
            else ""
        )
        return Answer(
            Reason.FRAGMENTATION,
            f"{requeued}no node of partition {partition} has its GPUs (with cores and memory) free together now{free}",
            "nothing: it starts when running jobs on those nodes end (see eta); fewer GPUs per node may fit sooner",
        )  # fmt: skip
    if code in ("Dependency", "DependencyNeverSatisfied"):
        never = code == "DependencyNeverSatisfied"
        return Answer(
            Reason.DEPENDENCY,
            f"{requeued}it waits for {dependency or 'another job'}" + (", which can never be satisfied" if never else ""),
            "cancel it and resubmit without the dependency" if never else "nothing: it becomes eligible when that job does",
        )  # fmt: skip
    if code in NODES:
        return Answer(Reason.PROVISIONING, f"{requeued}a node it needs is not available ({reason})",
                      "wait for the node to return, or ask the platform team; or drop --nodelist")  # fmt: skip
    if code in ("JobHeldUser", "JobHeldAdmin"):
        who = "you (or your team)" if code == "JobHeldUser" else "an administrator"
        return Answer(Reason.INACTIVE, f"{requeued}held by {who} ({code})", "scontrol release JOBID")
    if code == "BeginTime":
        return Answer(Reason.UNKNOWN, f"{requeued}not eligible before its begin time",
                      "nothing: it queues at its begin time")  # fmt: skip
    if code == "None":
        return Answer(Reason.UNKNOWN, f"{requeued}not yet considered by the scheduler", "wait a few seconds")
    return Answer(Reason.UNKNOWN, f"{requeued}Slurm says {reason}", "see squeue(1) JOB REASON CODES")
