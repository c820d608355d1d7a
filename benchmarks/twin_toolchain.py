"""The twin's toolchain: cold build time and size, and a twin's start-up with a warm cache.

Cold: every component built by `python -m twin.toolchain.build` into empty caches (a fresh GOMODCACHE,
GOCACHE and twin cache under a temporary folder), as on a machine that has never built it; the module downloads
from the Go module proxy are part of it. Warm start-up: `invoke twin --stack metal --run true` with the cache
built, the whole command timed (control plane, nodes, Kueue, `pulumi up` of the policy, gpu-binpack).

Usage: python benchmarks/twin_toolchain.py [--cold] [--startup N]
Results of the last run are recorded in benchmarks/twin_toolchain.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cold() -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="twin-cold-") as scratch:
        base = Path(scratch)
        env = {**os.environ, "GOMODCACHE": str(base / "mod"), "GOCACHE": str(base / "build"),
               "GPUFLEET_TWIN_CACHE": str(base / "twin")}  # fmt: skip
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "twin.toolchain.build"], cwd=ROOT, env=env, check=True)
        total = time.monotonic() - start
        records = {}
        for record in sorted((base / "twin").glob("*/BUILD.json")):
            records[record.parent.name] = json.loads(record.read_text())
        modules = sum(p.stat().st_size for p in (base / "mod").rglob("*") if p.is_file())
        return {"seconds": round(total), "components": records, "module_cache_bytes": modules}


def startup(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "invoke", "twin", "--stack", "metal", "--run", "true"],
                       cwd=ROOT, check=True, capture_output=True)  # fmt: skip
        times.append(round(time.monotonic() - start, 1))
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold", action="store_true", help="build everything into empty caches")
    parser.add_argument("--startup", type=int, default=3, help="warm start-up runs")
    args = parser.parse_args()
    if args.cold:
        result = cold()
        print(json.dumps(result, indent=2))
        sizes = sum(int(r["bytes"]) for r in result["components"].values())  # type: ignore[union-attr]
        print(f"cold build: {result['seconds']} s, binaries {sizes // 2**20} MiB, "
              f"module cache {int(result['module_cache_bytes']) // 2**20} MiB")  # type: ignore[call-overload]  # fmt: skip
    if args.startup:
        times = startup(args.startup)
        print(
            f"warm start-up of the metal twin (policy deployed): median {statistics.median(times)} s, runs {times}"
        )


if __name__ == "__main__":
    main()
