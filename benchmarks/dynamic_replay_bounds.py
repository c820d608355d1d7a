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
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from infra.stackfile import load_stack  # noqa: E402
from twin import launch  # noqa: E402
from twin.dynamic_replay import replay_on_twin, scaled_trace  # noqa: E402
from twin.replay_bounds import BOUNDS, DURATION_S, JOBS, RATE_PER_S, SEED, measures, replay_stack  # noqa: E402
from twin.replay_record import analyse, save  # noqa: E402


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
    for name in sims[0]:
        cells = []
        for rows in (sims, nulls):
            values = [r[name] for r in rows]
            cells.append(f"{min(values):.3g} / {median(values):.3g} / {max(values):.3g}")
        bound = f"{BOUNDS[name][0]:g}-{BOUNDS[name][1]:g}" if name in BOUNDS else "reported"
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {bound} |")
    return "\n".join(lines)


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
