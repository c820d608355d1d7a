"""`scontrol -o show job ID`, parsed: one job's story as slurmctld holds it.

scontrol(1) of Slurm 22.05: `-o` ("--oneliner") prints each record on one line as `Key=Value` pairs separated
by spaces (src/api/job_info.c `slurm_sprint_job_info`). Keys hold `:` and `/` (`AllocNode:Sid`, `CPUs/Task`),
and a value may hold spaces (`Command=`, `WorkDir=` of paths with spaces), so a pair ends where the next
` Key=` begins. The fields read here: JobId, JobName, UserId, Account, QOS, JobState, Reason, Dependency,
Priority, Restarts, Partition, TimeLimit, RunTime, SubmitTime, StartTime (the expected start of a pending
job where the backfill scheduler set one), EndTime, NodeList, SchedNodeList (the nodes it is expected to
start on), TRES (what it asks: `gres/gpu:h100=1`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from scheduler.slurm.answers.limits import tres_map
from scheduler.slurm.answers.squeue import slurm_time

_KEY = re.compile(r"(?:^| )([A-Za-z][\w:/]*)=")


def fields(line: str) -> dict[str, str]:
    """`Key=Value` pairs of one `scontrol -o` record."""
    starts = list(_KEY.finditer(line.rstrip("\n")))
    out = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(line.rstrip("\n"))
        out[m.group(1)] = line[m.end() : end].strip()
    return out


@dataclass(frozen=True)
class JobStory:
    job_id: str
    name: str
    user: str
    account: str
    qos: str
    state: str
    reason: str
    dependency: str
    priority: int
    restarts: int
    partition: str
    time_limit: str
    run_time: str
    submitted: datetime | None
    start: datetime | None
    end: datetime | None
    nodes: str  # where it runs; for a pending job the nodes it is expected to start on, if known
    tres: dict[str, int]

    def gpus(self) -> dict[str, int]:
        """What it asks of each GPU TRES (`gres/gpu:h100`, `gres/shard`; the untyped `gres/gpu` too)."""
        return {k: v for k, v in self.tres.items() if k.startswith(("gres/gpu", "gres/shard"))}


def parse_job(text: str) -> JobStory:
    line = next((ln for ln in text.splitlines() if ln.startswith("JobId=")), "")
    if not line:
        raise ValueError(f"scontrol printed no job record: {text.strip()[:200]!r}")
    f = fields(line)
    dependency = f.get("Dependency", "")
    nodes = f.get("NodeList", "") or f.get("SchedNodeList", "")
    return JobStory(
        job_id=f["JobId"], name=f.get("JobName", ""), user=f.get("UserId", "").split("(")[0],
        account=f.get("Account", ""), qos=f.get("QOS", ""), state=f.get("JobState", ""),
        reason=f.get("Reason", "None"), dependency="" if dependency == "(null)" else dependency,
        priority=int(f.get("Priority", "0") or 0), restarts=int(f.get("Restarts", "0") or 0),
        partition=f.get("Partition", ""), time_limit=f.get("TimeLimit", ""), run_time=f.get("RunTime", ""),
        submitted=slurm_time(f.get("SubmitTime", "")), start=slurm_time(f.get("StartTime", "")),
        end=slurm_time(f.get("EndTime", "")), nodes="" if nodes == "(null)" else nodes,
        tres=tres_map(f.get("TRES", "")),
    )  # fmt: skip
