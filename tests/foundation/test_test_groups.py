"""The test tiers run on two workers (`tests/phases.py`), and tests that share a machine-wide resource (a folder
of the clone, the Slurm daemons, a Debian root) carry an `xdist_group` so that they run one after the other on
one worker. pytest-xdist honours the mark only where it can rename a test's node id, which pytest 9.2 no longer
lets it do: the mark is then silently ignored, two twins start in one folder and each test's clean-up kills the
other's. This runs the installed pytest and pytest-xdist the way the tiers do and checks that a group stays on
one worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GROUPED = """
import os, pytest

pytestmark = pytest.mark.xdist_group("shared-folder")


@pytest.mark.parametrize("case", range(8))
def test_grouped(case):
    with open("workers.txt", "a") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""

FREE = """
import pytest


@pytest.mark.parametrize("case", range(8))
def test_free(case):
    pass
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_free.py").write_text(FREE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 8, workers
    assert len(set(workers)) == 1, (
        f"the group ran on {sorted(set(workers))}: pytest-xdist ignored xdist_group"
    )
