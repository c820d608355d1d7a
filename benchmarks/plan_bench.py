"""`invoke plan` wall time per example stack (target: under 3 s, no network).

Runs the real command in a fresh process (imports included), five times per stack, and prints the median.
Usage: python benchmarks/plan_bench.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    print(f"{'stack':<14} {'median s':>9} {'max s':>7}")
    with tempfile.TemporaryDirectory() as out:
        for stack in ("dev", "example-prod", "metal"):
            times = []
            for _ in range(5):
                start = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "invoke", "plan", "--stack", stack, "--out", out],
                    cwd=ROOT,
                    check=True,
                    capture_output=True,
                )
                times.append(time.perf_counter() - start)
            print(f"{stack:<14} {statistics.median(times):>9.3f} {max(times):>7.3f}")


if __name__ == "__main__":
    main()
