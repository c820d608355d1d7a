"""Traces with time: when each job arrives and how long it runs, for the dynamic simulation.

Two formats, told apart by their header:

- **openb** (the Alibaba GPU trace of the FGD paper): ``creation_time``, ``scheduled_time``, ``deletion_time``
  in seconds. A job arrives at its creation time and runs for ``deletion_time - scheduled_time``; a pod the
  trace never scheduled (``scheduled_time`` empty, phase Pending) runs for ``deletion_time - creation_time``,
  the life the trace gave it.
- **generic**: ``arrival`` and ``duration`` in seconds, the request columns of the placement traces
  (``cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec]``), and optionally ``pods`` (a gang of that many
  identical pods, default 1), ``team`` (the team's name), ``queue`` (the team's LocalQueue: ``default`` or
  ``topology``) and ``priority`` (a WorkloadPriorityClass name).

Every malformed value raises :class:`TraceError` naming the file and the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.fgd.model import Workload
from scheduler.sim.errors import TraceError
from scheduler.sim.traces import _rows, read_pods

OPENB_TIMES = ("creation_time", "deletion_time")
GENERIC_TIMES = ("arrival", "duration")


@dataclass(frozen=True, eq=False)
class TimedTrace:
    """Jobs of a trace: one request row each, with arrival, duration, gang size, team and priority names."""

    workload: Workload
    arrival: np.ndarray
    duration: np.ndarray
    pods: np.ndarray
    team: tuple[str, ...]  # "" where the trace names none
    priority: tuple[str, ...]  # "" where the trace names none
    queue: tuple[str, ...] = ()  # the LocalQueue each job is submitted to; "" (or none at all): default


def _seconds(
    row: dict[str, str], column: str, path: Path, number: int, empty_ok: bool = False
) -> float | None:
    raw = (row.get(column) or "").strip()
    if not raw:
        if empty_ok:
            return None
        raise TraceError(
            f"column {column!r} is empty; expected seconds (a number >= 0)", path=str(path), row=number
        )
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(
            f"column {column!r} must be seconds (a number >= 0), got {raw!r}", path=str(path), row=number
        ) from None
    if not np.isfinite(value) or value < 0:
        raise TraceError(
            f"column {column!r} must be seconds (a number >= 0), got {raw!r}", path=str(path), row=number
        )
    return value


def read_timed_pods(path: str | Path) -> TimedTrace:
    """Read an openb pod list or a generic timed CSV (see the module docstring)."""
    path = Path(path)
    workload = read_pods(path)  # the request columns, checked as for the placement replay
    arrival: list[float] = []
    duration: list[float] = []
    pods: list[int] = []
    teams: list[str] = []
    priorities: list[str] = []
    queues: list[str] = []
    header: list[str] = []
    for number, row in _rows(path, ()):
        if not header:
            header = list(row)
            if not (all(c in header for c in OPENB_TIMES) or all(c in header for c in GENERIC_TIMES)):
                raise TraceError(
                    "a dynamic simulation needs times: columns creation_time, deletion_time[, scheduled_time] "
                    f"(openb) or arrival, duration (found: {', '.join(header)})",
                    path=str(path),
                )
        if "arrival" in header:
            start = _seconds(row, "arrival", path, number)
            length = _seconds(row, "duration", path, number)
            assert start is not None and length is not None
        else:
            created = _seconds(row, "creation_time", path, number)
            deleted = _seconds(row, "deletion_time", path, number)
            scheduled = (
                _seconds(row, "scheduled_time", path, number, empty_ok=True)
                if "scheduled_time" in header
                else None
            )
            assert created is not None and deleted is not None
            began = scheduled if scheduled is not None else created
            if deleted < began:
                raise TraceError(
                    f"deletion_time {deleted:g} is before {'scheduled' if scheduled is not None else 'creation'}_time "
                    f"{began:g}",
                    path=str(path),
                    row=number,
                )
            start, length = created, deleted - began
        gang = (row.get("pods") or "").strip()
        if gang:
            if not gang.isdigit() or int(gang) < 1:
                raise TraceError(
                    f"column 'pods' must be a whole number >= 1, got {gang!r}", path=str(path), row=number
                )
            pods.append(int(gang))
        else:
            pods.append(1)
        arrival.append(start)
        duration.append(max(length, 1.0))  # a zero-length job still holds its GPUs for an instant
        teams.append((row.get("team") or "").strip())
        priorities.append((row.get("priority") or "").strip())
        queues.append((row.get("queue") or "").strip())
    t0 = min(arrival) if arrival else 0.0
    return TimedTrace(
        workload=workload,
        arrival=np.array(arrival, dtype=np.float64) - t0,
        duration=np.array(duration, dtype=np.float64),
        pods=np.array(pods, dtype=np.int64),
        team=tuple(teams),
        priority=tuple(priorities),
        queue=tuple(queues),
    )
