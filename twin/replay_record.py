"""A twin replay kept for re-analysis: what the twin did, the jobs it was given and the stack it ran, written
to a folder, so the comparison with the simulator (and with the null model) can be run again later, without a
twin, when the simulator or the comparison changes.

A record folder holds:

- ``Pulumi.<stack>.yaml``: the stack file the twin ran (the simulator builds the same world from it);
- ``jobs.json``: the planned jobs (``ReplayJob``), in order;
- ``twin-record.json``: the twin's ``TwinRecord`` (JSON keys are strings; :func:`load` turns them back);
- ``replay.csv``: the trace given to the simulator (the twin's arrivals and holds, ``arrival_trace``);
- ``comparison.json`` and ``null-comparison.json``: written by :func:`analyse`, the last analysis.

``python -m twin.replay_record compare [--durations=held|ran] FOLDER...`` re-runs the comparison of each folder and prints, per
folder, the simulator's and the null model's measures and the bounds each misses.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from twin.dynamic_replay import Comparison, ReplayJob, TwinRecord, compare, simulate, write_trace
from twin.replay_bounds import NULL_MODEL, measures, missed

JOBS, TWIN, TRACE = "jobs.json", "twin-record.json", "replay.csv"
HELD, RAN = "held", "ran"
DURATIONS = (HELD, RAN)


@dataclass(frozen=True)
class Record:
    stack: Path
    jobs: list[ReplayJob]
    twin: TwinRecord


def save(folder: Path, stack: Path, jobs: list[ReplayJob], twin: TwinRecord) -> Path:
    """Write one replay's record under ``folder`` (created) and the simulator's trace from it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(stack, folder / stack.name)
    (folder / JOBS).write_text(json.dumps([asdict(j) for j in jobs]))
    (folder / TWIN).write_text(json.dumps(asdict(twin), default=sorted))
    arrival_trace(Record(folder / stack.name, jobs, twin), folder / TRACE)
    return folder


def load(folder: Path) -> Record:
    """A record written by :func:`save`; a folder without one is a ``ValueError`` that names the file."""
    stacks = sorted(folder.glob("Pulumi.*.yaml"))
    for name in (JOBS, TWIN):
        if not (folder / name).is_file() or not stacks:
            raise ValueError(f"{folder}: no {name if stacks else 'Pulumi.<stack>.yaml'}; a replay record "
                             f"holds Pulumi.<stack>.yaml, {JOBS} and {TWIN}")  # fmt: skip
    jobs = [ReplayJob(**row) for row in json.loads((folder / JOBS).read_text())]
    raw = json.loads((folder / TWIN).read_text())

    def by_job(d: dict[str, float]) -> dict[int, float]:
        return {int(k): float(v) for k, v in d.items()}

    twin = TwinRecord(
        submitted=by_job(raw["submitted"]),
        created=by_job(raw["created"]),
        admitted=by_job(raw["admitted"]),
        last_admitted=by_job(raw["last_admitted"]),
        finished=by_job(raw["finished"]),
        ready=by_job(raw.get("ready", {})),  # records from before the watch kept `PodsReady` have none
        preempted={int(j) for j in raw["preempted"]},
        reasons={str(k): int(v) for k, v in raw["reasons"].items()},
        preemptions=[(float(t), int(v), int(b), str(r)) for t, v, b, r in raw["preemptions"]],
        holds=[(int(j), float(a), float(b), bool(d)) for j, a, b, d in raw["holds"]],
        seconds=float(raw.get("seconds", 0.0)),
    )
    return Record(stacks[0], jobs, twin)


def arrival_trace(record: Record, path: Path, durations: str = HELD) -> Path:
    """The trace the simulator is given: each job's arrival is when the twin's Kueue first had its Workload;
    its duration (``durations``) either ``held``: how long its last admission held the quota on the twin, from
    `Admitted` to `Finished` (the run plus the twin's lag in creating, binding and starting its pods, to which
    the simulator adds its own placement lag), or ``ran``: from all its pods running (`PodsReady`) to
    `Finished` (without the twin's start lag, of which the simulator models only the placement). A job without
    the times asked for gets its hold, else its planned duration."""
    return write_trace(record.jobs, path, *trace_inputs(record, durations))


def trace_inputs(record: Record, durations: str = HELD) -> tuple[list[float], list[float]]:
    """Each job's arrival and duration as :func:`arrival_trace` gives them to the simulator."""
    if durations not in DURATIONS:
        raise ValueError(f"durations {durations!r}; accepted: {', '.join(DURATIONS)}")
    twin = record.twin
    arrivals = [twin.created[j.index] for j in record.jobs]
    out = []
    for job in record.jobs:
        ran = twin.ran(job.index) if durations == RAN else None
        held = twin.held(job.index)
        out.append(ran if ran is not None else held if held is not None else job.duration)
    return arrivals, out


def analyse(folder: Path, durations: str = HELD) -> tuple[Comparison, Comparison]:
    """The simulator and the null model, each compared with the twin's record in ``folder`` (the jobs'
    durations as :func:`arrival_trace` takes them); both comparisons are written beside the record."""
    from infra.stackfile import load_stack

    record = load(folder)
    spec = load_stack(record.stack)
    trace = arrival_trace(record, folder / TRACE, durations)
    out = []
    suffix = "" if durations == HELD else f"-{durations}"
    for name, approach in ((f"comparison{suffix}.json", None), (f"null-comparison{suffix}.json", NULL_MODEL)):
        result = compare(record.twin, simulate(spec, trace, approach=approach), record.jobs)
        summary = {"measures": measures(result), "missed": missed(result), "comparison": asdict(result)}
        (folder / name).write_text(json.dumps(summary, indent=1, default=list))
        out.append(result)
    return out[0], out[1]


def main(argv: list[str]) -> int:
    durations = HELD
    if len(argv) >= 2 and argv[0] == "compare" and argv[1].startswith("--durations="):
        durations = argv.pop(1).split("=", 1)[1]
    if len(argv) < 2 or argv[0] != "compare" or durations not in DURATIONS:
        print(f"usage: python -m twin.replay_record compare [--durations={'|'.join(DURATIONS)}] FOLDER...",
              file=sys.stderr)  # fmt: skip
        return 2
    for arg in argv[1:]:
        try:
            sim, null = analyse(Path(arg), durations)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        for label, result in (("simulator", sim), (f"null model ({NULL_MODEL})", null)):
            print(f"{arg} {label}: " + json.dumps({k: round(v, 3) for k, v in measures(result).items()}))
            print(f"{arg} {label} misses: {', '.join(missed(result)) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
