"""How long a job runs, as far as its team can know: the duration hint it carries, else its deadline, else the
team's history of similar finished jobs.

The hint is the job's `gpufleet.io/expected-duration` annotation, a Go-style duration (`90m`, `1h30m`, `45s`)
or plain seconds; a batch Job's `spec.activeDeadlineSeconds` bounds its run (the job controller fails it
then), so it stands in as the longest the job may hold its GPUs. Without either, the remaining time is drawn
from the team's finished jobs: those of the same pool and GPUs when there are enough, else all of them; a team
with no finished job yet lends its hinted jobs' whole runs instead (`scheduler.explain.eta.hinted`), and
NO_HISTORY_S stands in only when it has neither.

A job that has run for a while is not a fresh one: its remaining time is drawn from the finished durations
longer than what it has already run (the residual life), and when none is longer, from up to as long again as
it has run.

A job holds its quota longer than it runs: its pods are created, scheduled and started after Kueue admits it,
and its completion is seen and its quota released after they end. A duration hint is the run, so the team's
finished Jobs that carried one say by how much more: the median of their admission-to-completion time less the
hint (`holding_lag`), added to every hinted run. On the twin it is about 1.2-1.6 s a job; on a real cluster,
where images are pulled and containers start, it may be minutes, and along a queue of jobs it adds up.

Another team's running job is not readable at all, not even when it started, but it is caught partway
through: a look at a random moment falls in a long run more often than in a short one (the inspection
paradox), so the run it falls in has the length-biased law d f(d) / E[D] and the look lands uniformly within
it; the remaining time then follows the residual-life law of renewal theory, of mean E[D^2] / (2 E[D]) (with
runs uniform in 20-60 s, about 22 s, not the 40 s of a fresh run).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

HINT = "gpufleet.io/expected-duration"
HISTORY = 20  # the most recent finished jobs a remaining time is drawn from
SIMILAR_AT_LEAST = 5  # similar finished jobs needed before the history narrows to them
NO_HISTORY_S = 3600.0  # a job's run when the team has no finished job to learn from (said in the answer)
CAUGHT = "caught"  # the source of a running job whose start cannot be read: another team's
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


class HintError(ValueError):
    """A duration hint that is not a duration; the message names the annotation and what it accepts."""


def parse_duration(text: str) -> float:
    """Seconds of `90m`, `1h30m`, `45s`, `2d` or `5400`; HintError otherwise."""
    value = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return float(value)
    if value and _PART.sub("", value) == "":
        return sum(float(n) * _UNITS[u] for n, u in _PART.findall(value))
    raise HintError(
        f"annotation {HINT}: {text!r} is not a duration (accepted: seconds, or Go durations such as 45m, 1h30m, 2d)"
    )


def parse_time(stamp: str) -> datetime:
    """An RFC 3339 timestamp as the API server writes it (`2026-12-05T08:00:00Z`)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Finished:
    """A finished job of the team: how long it ran, on which pool, with how many GPUs in all."""

    seconds: float
    pool: str
    gpus: int
    ended: str  # RFC 3339: the history keeps the most recent
    hint: float | None = None  # the run its duration hint announced, where it carried one


def finished_jobs(jobs: Sequence[Mapping[str, Any]]) -> list[Finished]:
    """The team's batch Jobs that completed, from `status.startTime` (the job was unsuspended: admitted) to
    `status.completionTime` (batch/v1 JobStatus), most recent last."""
    out = []
    for job in jobs:
        status = job.get("status", {}) or {}
        start, end = status.get("startTime"), status.get("completionTime")
        if not (start and end):
            continue
        template = job.get("spec", {}).get("template", {}).get("spec", {}) or {}
        pool = str((template.get("nodeSelector") or {}).get("gpufleet.io/pool", ""))
        pods = int(job.get("spec", {}).get("parallelism") or 1)
        gpus = pods * sum(_gpus(c) for c in template.get("containers", []) or [])
        seconds = (parse_time(end) - parse_time(start)).total_seconds()
        out.append(Finished(max(seconds, 0.0), pool, gpus, str(end), _hint(job)))
    return sorted(out, key=lambda f: f.ended)


def _hint(job: Mapping[str, Any]) -> float | None:
    text = (job.get("metadata", {}).get("annotations") or {}).get(HINT)
    try:
        return None if text is None else parse_duration(str(text))
    except HintError:
        return None


def holding_lag(history: Sequence[Finished]) -> float:
    """Seconds a hinted job holds its quota beyond its hint (the module docstring says why): the median over the
    team's last HISTORY finished hinted jobs of their run less their hint, never below 0; 0 without any."""
    over = [f.seconds - f.hint for f in history if f.hint is not None][-HISTORY:]
    return max(float(np.median(over)), 0.0) if over else 0.0


def _gpus(container: Mapping[str, Any]) -> int:
    requests = (container.get("resources", {}) or {}).get("requests", {}) or {}
    return sum(int(float(v)) for k, v in requests.items() if str(k).startswith("nvidia.com/"))


@dataclass(frozen=True)
class Remaining:
    """What is known of a job's remaining run: `known` seconds (a hint or a deadline, less the time it has
    run), or nothing, and then it is drawn from `history`; `source` says which, for the answer."""

    known: float | None
    source: str  # "hint", "deadline", "history", "none", CAUGHT
    elapsed: float = 0.0


def remaining_of(job: Mapping[str, Any] | None, elapsed: float) -> Remaining:
    """A job's remaining run from its hint or its deadline (either less `elapsed`); HintError for a bad hint."""
    if job is not None:
        hint = (job.get("metadata", {}).get("annotations") or {}).get(HINT)
        if hint is not None:
            return Remaining(max(parse_duration(str(hint)) - elapsed, 0.0), "hint", elapsed)
        deadline = job.get("spec", {}).get("activeDeadlineSeconds")
        if deadline is not None:
            return Remaining(max(float(deadline) - elapsed, 0.0), "deadline", elapsed)
    return Remaining(None, "history", elapsed)


def history_for(history: Sequence[Finished], pool: str, gpus: int) -> tuple[list[float], bool]:
    """The durations a job's run is drawn from: the team's last HISTORY finished jobs of the same pool and
    GPUs when there are SIMILAR_AT_LEAST of them (True), else its last HISTORY of any kind (False)."""
    similar = [f.seconds for f in history if f.pool == pool and f.gpus == gpus][-HISTORY:]
    if len(similar) >= SIMILAR_AT_LEAST:
        return similar, True
    return [f.seconds for f in history][-HISTORY:], False


def residual(durations: Sequence[float], rng: np.random.Generator) -> float:
    """One draw of what is left of a run caught at a random moment (the module docstring says why): a duration
    picked in proportion to its length, and a uniform point of it; of NO_HISTORY_S when there is none."""
    runs = np.asarray(durations, dtype=np.float64)
    if not len(runs) or runs.sum() <= 0:
        return float(rng.uniform(0.0, NO_HISTORY_S))
    return float(rng.choice(runs, p=runs / runs.sum()) * rng.uniform())


def draw(
    remaining: Remaining, durations: Sequence[float], rng: np.random.Generator, lag: float = 0.0
) -> float:
    """One draw of the remaining run: the known one (with `lag`, the quota held beyond a hint, when it is a
    hint's); a residual life when it was caught running (CAUGHT); else a finished duration longer than what it
    has run, less that (else up to as long again as it has run), else NO_HISTORY_S less what it has run."""
    if remaining.known is not None:
        return remaining.known + (lag if remaining.source == "hint" else 0.0)
    if remaining.source == CAUGHT:
        return residual(durations, rng)
    longer = [d - remaining.elapsed for d in durations if d > remaining.elapsed]
    if longer:
        return float(rng.choice(longer))
    if durations:
        return float(rng.uniform(0.0, max(remaining.elapsed, 1.0)))
    return max(NO_HISTORY_S - remaining.elapsed, 60.0)
