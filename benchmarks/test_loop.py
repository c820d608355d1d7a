"""The README's test command, timed per phase on a clean clone: warm (the twin's toolchain cached) or cold (a
machine that has never built it: an empty twin cache, Go module cache and Go build cache).

    .venv/bin/python benchmarks/test_loop.py [--cold] [--ref HEAD] [--out benchmarks/test_loop.md]

Clones `--ref` of this repository into a temporary folder, runs `.ci/run` there with CI=true (venv, pip install,
`invoke test`), and appends the phase times `invoke test` prints (tests/phases.py) and the whole run's wall time
to the Markdown file, with the date and the machine's core count. A number, not a timed test: the targets
(README, "Quickstart") are checked by reading this file, never asserted in the test suite.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def phase_times(log: str) -> list[tuple[str, float, float | None]]:
    """The `phase times:` block `invoke test` ends with: (phase, wall seconds, CPU seconds where printed), the
    total last."""
    block = log.split("phase times:", 1)[1] if "phase times:" in log else ""
    rows = re.finditer(r"^  (.+?)\s+(\d+) s(?:\s+(\d+) s CPU)?$", block, re.M)
    return [(m.group(1).strip(), float(m.group(2)), float(m.group(3)) if m.group(3) else None) for m in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="the revision to clone (default HEAD)")
    parser.add_argument("--cold", action="store_true", help="empty twin, Go module and Go build caches")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "test_loop.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "gpufleet"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", args.ref], check=True)
        env = {
            **os.environ,
            "CI": "true",
            "GPUFLEET_SHARED": os.environ.get("GPUFLEET_SHARED", str(ROOT.parent / "shared")),
        }
        if args.cold:
            for name, var in (
                ("twin", "GPUFLEET_TWIN_CACHE"),
                ("gomod", "GOMODCACHE"),
                ("gobuild", "GOCACHE"),
            ):
                (Path(tmp) / name).mkdir()
                env[var] = str(Path(tmp) / name)
        started = time.monotonic()
        done = subprocess.run(
            ["bash", ".ci/run"], cwd=clone, env=env, capture_output=True, text=True, check=False
        )
        wall = time.monotonic() - started
        if args.cold:  # the Go module cache is written read-only
            subprocess.run(["chmod", "-R", "u+w", str(Path(tmp) / "gomod")], check=False)
    log = done.stdout + done.stderr
    rows = phase_times(log)
    passed = re.findall(r"(\d+) passed", log)
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.ref], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        f"## {'Cold' if args.cold else 'Warm'} run, {datetime.now(UTC):%Y-%m-%d}, {head}, {os.cpu_count()} cores",
        "",
        f"`.ci/run` exit {done.returncode}, {wall / 60:.1f} min wall (venv and pip install included); "
        f"tests passed per tier: {', '.join(passed) or 'none'}.",
        "",
        "| phase | seconds | CPU seconds |",
        "|---|---:|---:|",
        *[
            f"| {name} | {seconds:.0f} | {'' if cpu is None else f'{cpu:.0f}'} |"
            for name, seconds, cpu in rows
        ],
        "",
    ]
    with Path(args.out).open("a") as out:
        out.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if done.returncode:
        print(log[-4000:], file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
