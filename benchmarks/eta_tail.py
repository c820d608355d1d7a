"""Where `eta`'s worst errors lie: the rows recorded by benchmarks/eta_accuracy.py runs, each job that waited
classed by how its estimate missed, scored from the moment `eta` counts from (``eta_accuracy.clock``) and, as
the runs up to the ninth were scored, from when each view's reads began.

Usage: python benchmarks/eta_tail.py [FILE[:KEY] ...]   (default: every recorded run, under benchmarks/)

No twin. Per run and view: the median and 90th percentile of |error| / wait over the jobs that waited at least
MIN_WAIT_S, the worst tenth by it, and the jobs over TARGET_P90 by class (the target allows a tenth of them):

- ``by the create``: estimated to start by the moment it was created, yet it waited (what the estimate saw
  free was taken before the create; listed with the jobs the twin admitted between the estimate's moment and
  the create);
- ``lag-sized``: off by no more than LAG_SIZED_S, two of the twin's per-job lags (1.56 s a job, measured by
  benchmarks/eta_playout.py from the rows), in a short wait;
- ``late`` and ``early``: the rest, by the sign of the error.

Results are in benchmarks/eta_accuracy.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from eta_accuracy import MIN_WAIT_S, TARGET_P90, clock, said_from  # noqa: E402

RUNS = ("eta_accuracy.json", "eta_accuracy_arrivals.json", "eta_accuracy_rates.json:fifth",
        "eta_accuracy_rates.json:sixth", "eta_accuracy_residual.json:seventh", "eta_accuracy_full.json",
        "eta_accuracy_lag.json:ninth", "eta_accuracy_clock.json")  # fmt: skip
LAG_SIZED_S = 2 * 1.56
VIEWS = {"member": ("p50_s", ""), "full": ("full_p50_s", "full_")}

Row = dict[str, Any]


def reads_began(row: Row, view: str) -> float:
    """Where the runs up to the ninth counted an estimate from: when its view's reads began."""
    return float(row["asked_full"] if view else row["asked"])


def missed(row: Row, key: str, origin: float) -> tuple[float, float]:
    """(error in s, + late; |error| / wait) of the start the estimate says from `origin`, never before the
    create."""
    error = said_from(row, key, origin) - row["admitted"]
    return error, abs(error) / (row["admitted"] - row["submitted"])


def kind(row: Row, key: str, origin: float) -> str:
    error, _ = missed(row, key, origin)
    value = row[key]
    if value is not None and origin + value <= row["submitted"]:
        return "by the create"
    if abs(error) <= LAG_SIZED_S:
        return "lag-sized"
    return "late" if error > 0 else "early"


def taken_between(rows: Sequence[Row], row: Row, since: float) -> list[str]:
    """The jobs the twin admitted between the estimate's moment and the create: what took the quota it saw."""
    return [f"{r['job']} ({r['team']} {r['gpus']})" for r in rows
            if r is not row and r["admitted"] is not None and since <= r["admitted"] < row["submitted"]]  # fmt: skip


def report(name: str, runs: dict[str, list[Row]], key: str, origin: Callable[[Row], float]) -> None:
    jobs = [(s, r) for s, rows in runs.items() for r in rows
            if r["admitted"] is not None and r["admitted"] - r["submitted"] >= MIN_WAIT_S]  # fmt: skip
    if not jobs:
        return
    rel = np.array([missed(r, key, origin(r))[1] for _, r in jobs])
    print(f"  {name}: {len(jobs)} waited, median {np.median(rel):.2f}, p90 {np.percentile(rel, 90):.2f}")
    worst = sorted(jobs, key=lambda sr: -missed(sr[1], key, origin(sr[1]))[1])[: -(-len(jobs) // 10)]
    for s, r in worst:
        error, relative = missed(r, key, origin(r))
        print(f"    worst tenth: seed {s} job {r['job']} {r['team']} {r['gpus']} GPUs {r['priority']}, wait "
              f"{r['admitted'] - r['submitted']:.0f} s, error {error:+.0f} s ({relative:.2f}): {kind(r, key, origin(r))}")  # fmt: skip
    over: dict[str, list[tuple[str, Row]]] = {}
    for s, r in jobs:
        if missed(r, key, origin(r))[1] > TARGET_P90:
            over.setdefault(kind(r, key, origin(r)), []).append((s, r))
    for c, members in sorted(over.items()):
        waits = [r["admitted"] - r["submitted"] for _, r in members]
        errors = [missed(r, key, origin(r))[0] for _, r in members]
        print(f"    over {TARGET_P90:g}: {c} {len(members)}, waits {min(waits):.0f}-{max(waits):.0f} s, errors "
              f"{min(errors):+.0f} to {max(errors):+.0f} s (sum {sum(abs(e) for e in errors):.0f} s)")  # fmt: skip
        if c == "by the create":
            for s, r in members:
                lead = r["submitted"] - origin(r)
                print(f"      seed {s} job {r['job']} ({r['team']} {r['gpus']}): estimate {r[key]:.1f} s, created "
                      f"{lead:.1f} s after its moment; admitted in between: "
                      f"{', '.join(taken_between(runs[s], r, origin(r))) or 'none'}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs", nargs="*", default=list(RUNS), help="FILE[:KEY], a path or a name under benchmarks/"
    )
    args = parser.parse_args()
    for spec in args.runs:
        file, _, key = spec.partition(":")
        path = Path(file) if Path(file).exists() else ROOT / "benchmarks" / file
        doc = json.loads(path.read_text())
        doc = doc[key] if key else doc
        runs = {s: run["rows"] for s, run in doc["runs"].items()}
        print(spec)
        for view, (field, prefix) in VIEWS.items():
            if not any(field in r for rows in runs.values() for r in rows):
                continue
            report(f"{view}, from eta's now", runs, field, partial(clock, view=prefix))
            report(f"{view}, from the reads' start", runs, field, partial(reads_began, view=prefix))


if __name__ == "__main__":
    main()
