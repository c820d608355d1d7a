"""The dynamic replay's bounds, measured: the replay of ``tests/twin/test_dynamic_replay.py`` run N times, a
fresh twin each run (as the test's fixture starts one), each run's record kept for re-analysis, and every
compared measure's lowest, median and highest over the runs, for the simulator and for the null model.

Usage: python benchmarks/dynamic_replay_bounds.py [--runs 6] [--out build/test-logs/dynamic-replay]
       python benchmarks/dynamic_replay_bounds.py --table FOLDER...   (re-analyse kept records, no twin)

Each run's record goes to ``OUT/<UTC time>-bounds-<i>/`` (``twin.replay_record``); the table is printed as
Markdown. Results of the last calibration, and the bounds set from them, are in
benchmarks/dynamic_replay_bounds.md. A run takes about nine minutes on two cores.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from infra.stackfile import load_stack  # noqa: E402
from twin import launch  # noqa: E402
from twin.dynamic_replay import compare, replay_on_twin, scaled_trace, simulate, write_trace  # noqa: E402
from twin.replay_bounds import BOUNDS, DURATION_S, JOBS, RATE_PER_S, SEED, measures, replay_stack  # noqa: E402
from twin.replay_record import HELD, RAN, analyse, load, save, trace_inputs  # noqa: E402


def one_run(folder: Path) -> Path:
    """One replay on a fresh twin; its record in ``folder``."""
    scratch = Path(tempfile.mkdtemp(prefix="dynamic-replay-"))
    stack = scratch / "Pulumi.replay.yaml"
    stack.write_text(yaml.safe_dump(replay_stack(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())),
                                    sort_keys=False))  # fmt: skip
    spec = load_stack(stack)
    with (scratch / "twin.out").open("wb") as log:
        twin = launch.start(stack, spec, scratch / "twin", time_scale="0.01", stdout=log,
                            lock=scratch / "twin.lock", say=lambda _line: None)  # fmt: skip
        try:
            jobs = scaled_trace([t.name for t in spec.teams], jobs=JOBS, rate_per_s=RATE_PER_S,
                                duration_s=DURATION_S, seed=SEED)  # fmt: skip
            record = replay_on_twin(Path(twin.info["kubectl"]), twin.kubeconfig, jobs)
        finally:
            twin.stop()
    return save(folder, stack, jobs, record)


def table(folders: list[Path]) -> str:
    """Each measure's lowest / median / highest over the records, the simulator's and the null model's, and the
    bound the test holds."""
    sims, nulls = [], []
    for folder in folders:
        sim, null = analyse(folder)
        sims.append(measures(sim))
        nulls.append(measures(null))
    lines = [f"| measure ({len(folders)} runs) | simulator: min / median / max | null model: min / median / max "
             "| bound |", "|---|---|---|---|"]  # fmt: skip
    gaps = [gap(folder) for folder in folders]
    for name in gaps[0]:
        values = [g[name] for g in gaps]
        lines.append(
            f"| mean-wait gap: {name} | {min(values):.3g} / {median(values):.3g} / {max(values):.3g} | | |"
        )
    for name in sims[0]:
        cells = []
        for rows in (sims, nulls):
            values = [r[name] for r in rows]
            cells.append(f"{min(values):.3g} / {median(values):.3g} / {max(values):.3g}")
        bound = f"{BOUNDS[name][0]:g}-{BOUNDS[name][1]:g}" if name in BOUNDS else "reported"
        if name in BOUNDS:
            bound += " (from these runs: {:g}-{:g})".format(*proposed(name, [r[name] for r in sims]))
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {bound} |")
    return "\n".join(lines)


def proposed(name: str, values: list[float]) -> tuple[float, float]:
    """A bound from the measured runs, by the margin rule benchmarks/dynamic_replay_bounds.md states: a relative
    difference may reach 1.5 times the largest measured (at least 0.05); a ratio of the simulator's count over
    Kueue's may lie within the measured range widened by a quarter each way; the order agreement may fall 0.03
    below the lowest; the overlap of preempted jobs to three quarters of the lowest."""
    lo, hi = min(values), max(values)
    if name.endswith("_difference"):
        return 0.0, max(0.05, math.ceil(hi * 1.5 * 20) / 20)
    if name == "order_agreement":
        return math.floor((lo - 0.03) * 100) / 100, 1.0
    if name == "preempted_jaccard":
        return math.floor(lo * 0.75 * 20) / 20, 1.0
    return math.floor(lo / 1.25 * 20) / 20, math.ceil(hi * 1.25 * 20) / 20


def gap(folder: Path) -> dict[str, float]:
    """What the mean-wait gap follows, on one record: the twin's mean wait; the simulator's with each job given
    its hold on the twin (``held``, the default), its run from `PodsReady` (``ran``), and its hold less the
    simulator's own placement lag from the first pass (``held - placement``: each job holds quota on both sides
    for as long); the twin's lag from `Admitted` to `PodsReady` and the simulator's from admission to all pods
    placed (jobs never preempted); and the simulator's mean wait to all pods placed, the end its waits had before
    they ended at admission as the twin's do."""
    record = load(folder)
    spec = load_stack(record.stack)
    twin = record.twin
    out = {"twin_mean_wait_s": 0.0}
    arrivals, held = trace_inputs(record, HELD)
    first = simulate(spec, write_trace(record.jobs, folder / "gap-held.csv", arrivals, held))
    placed = {j: first.started[j] - first.admitted[j] for j in first.started if j not in first.preempted}
    less = [h - placed.get(j.index, 0.0) for h, j in zip(held, record.jobs, strict=True)]
    for name, durations in (
        ("held", held),
        ("ran", trace_inputs(record, RAN)[1]),
        ("held - placement", less),
    ):
        result = compare(twin, simulate(spec, write_trace(record.jobs, folder / "gap.csv", arrivals, durations)),
                         record.jobs)  # fmt: skip
        out["twin_mean_wait_s"] = result.twin_mean_wait_s
        out[f"sim_mean_wait_s ({name})"] = result.sim_mean_wait_s
    shift = min(twin.created.values())
    old = [max(first.started[j] + shift - twin.created[j], 0.0) for j in first.started]
    out["sim_mean_wait_s to all pods placed (held)"] = float(np.mean(old))
    start = [
        twin.ready[j] - twin.last_admitted[j] for j in twin.ready if twin.ready[j] >= twin.last_admitted[j]
    ]
    out["twin_admitted_to_pods_ready_s"] = float(np.mean(start)) if start else float("nan")
    out["sim_admitted_to_placed_s"] = float(np.mean(list(placed.values())))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="twin runs, a fresh twin each")
    parser.add_argument("--out", default=str(ROOT / "build" / "test-logs" / "dynamic-replay"),
                        help="where each run's record goes")  # fmt: skip
    parser.add_argument("--table", nargs="*", default=None, help="kept record folders: tabulate, run nothing")
    args = parser.parse_args()
    if args.table is not None:
        print(table([Path(f) for f in args.table]))
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folders = []
    for i in range(args.runs):
        start = time.monotonic()
        folders.append(one_run(Path(args.out) / f"{stamp}-bounds-{i + 1}"))
        print(f"run {i + 1}: {folders[-1]} ({time.monotonic() - start:.0f} s)", flush=True)
    print(table(folders))


if __name__ == "__main__":
    main()
