"""`sprio` with a `|`-separated `--format`, parsed: what a pending job's priority is made of.

Fields (sprio(1) of Slurm 22.05, SchedMD/slurm@slurm-22-05-8-1 doc/man/man1/sprio.1, "-o <output_format>"):
%i job id, %u user, %r partition, %Y job priority, %A weighted age, %F weighted fair-share, %Q weighted QOS,
%N nice adjustment. The stacks weigh age, fair share and QOS (scheduler.slurm.config: PriorityWeightAge,
PriorityWeightFairshare, PriorityWeightQOS), so these three are the job's priority less its nice value.
sprio lists pending jobs only, and under PrivateData=jobs only the caller's own (src/plugins/priority/
multifactor/priority_multifactor.c `priority_p_get_priority_factors_list`).
"""

from __future__ import annotations

from dataclasses import dataclass

FIELDS = ("%i", "%u", "%r", "%Y", "%A", "%F", "%Q", "%N")
FORMAT = "|".join(FIELDS)


@dataclass(frozen=True)
class PriorityFactors:
    job_id: str
    user: str
    partition: str
    priority: int
    age: int
    fairshare: int
    qos: int
    nice: int

    def says(self) -> str:
        return f"priority {self.priority} = QOS {self.qos} + fair share {self.fairshare} + age {self.age}" + (
            f" - nice {self.nice}" if self.nice else ""
        )


def sprio_argv(job_id: str = "") -> list[str]:
    return ["sprio", "--noheader", f"--format={FORMAT}", *([f"--jobs={job_id}"] if job_id else [])]


def _int(value: str) -> int:
    value = value.strip()
    return int(value) if value.lstrip("-").isdigit() else 0


def parse_sprio(text: str) -> list[PriorityFactors]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(FIELDS):
            raise ValueError(f"sprio printed a line of {len(cells)} fields, not {len(FIELDS)}: {line!r}")
        job_id, user, partition, *numbers = (c.strip() for c in cells)
        priority, age, fairshare, qos, nice = (_int(n) for n in numbers)
        out.append(PriorityFactors(job_id, user, partition, priority, age, fairshare, qos, nice))
    return out
