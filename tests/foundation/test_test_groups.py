"""The test tiers run on two workers (`tests/phases.py`), and tests that share a machine-wide resource (a folder
of the clone, the Slurm daemons, a Debian root) carry an `xdist_group` so that they run one after the other on
one worker. pytest-xdist honours the mark only where it can rename a test's node id, which pytest 9.2 no longer
lets it do: the mark is then silently ignored, two twins start in one folder and each test's clean-up kills the
other's. This runs the installed pytest and pytest-xdist the way the tiers do and checks that a group stays on
one worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

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


SHARED_CONFTEST = """
import pytest

from tests.conftest import pytest_collection_modifyitems  # the repository's grouping, as the tiers run it


@pytest.fixture(scope="session")
def metal_twin():
    return "a twin"
"""

MODULE_FIXTURE = """
import os, pytest


@pytest.fixture(scope="module")
def twin():
    return "a twin"


@pytest.mark.parametrize("case", range(6))
def test_module(twin, case):
    with open("module.txt", "a") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""

SESSION_FIXTURE = """
import os, pytest


@pytest.mark.parametrize("case", range(6))
def test_session(metal_twin, case):
    with open("session.txt", "a") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_tests_that_share_a_twin_run_on_one_worker(tmp_path: Path) -> None:
    """A module-scoped fixture's tests, and a session twin's users across modules, each stay on one worker, so the
    twin they share starts once: without the grouping `--dist loadgroup` spreads them over both."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(SHARED_CONFTEST)
    (tmp_path / "test_module.py").write_text(MODULE_FIXTURE)
    (tmp_path / "test_session_a.py").write_text(SESSION_FIXTURE)
    (tmp_path / "test_session_b.py").write_text(SESSION_FIXTURE)
    (tmp_path / "test_free.py").write_text(FREE.replace("range(8)", "range(12)"))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for name, count in (("module.txt", 6), ("session.txt", 12)):
        workers = (tmp_path / name).read_text().split()
        assert len(workers) == count and len(set(workers)) == 1, (name, workers)


def test_groups_are_handed_out_first_the_largest_first_each_in_its_own_order() -> None:
    """A long group handed out last would run alone on one worker at the end of the tier."""
    from types import SimpleNamespace
    from typing import Any, cast

    from tests.conftest import longest_first

    ids = ["free-1", "small-1", "big-1", "free-2", "big-2", "small-2", "big-3"]
    groups = {"small-1": "small", "small-2": "small", "big-1": "big", "big-2": "big", "big-3": "big"}
    items = cast(Any, [SimpleNamespace(nodeid=i) for i in ids])
    ordered = [item.nodeid for item in longest_first(items, groups)]
    assert ordered == ["big-1", "big-2", "big-3", "small-1", "small-2", "free-1", "free-2"]


def test_recorded_seconds_order_the_groups_and_the_single_tests() -> None:
    """A group of few long tests (a twin's start-up) must start before a group of many quick ones."""
    from types import SimpleNamespace
    from typing import Any, cast

    from tests.conftest import longest_first

    ids = ["free-1", "quick-1", "twin-1", "free-2", "quick-2", "quick-3"]
    groups = {"quick-1": "quick", "quick-2": "quick", "quick-3": "quick", "twin-1": "twin"}
    seconds = {"twin-1": 300.0, "quick-1": 2.0, "quick-2": 2.0, "quick-3": 2.0, "free-1": 1.0, "free-2": 9.0}
    items = cast(Any, [SimpleNamespace(nodeid=i) for i in ids])
    ordered = [item.nodeid for item in longest_first(items, groups, seconds)]
    assert ordered == ["twin-1", "quick-1", "quick-2", "quick-3", "free-2", "free-1"]


RECORDING_CONFTEST = """
from tests.conftest import pytest_runtest_logreport, pytest_sessionfinish  # the repository's recording
"""

RECORDED = """
import time, pytest


@pytest.fixture
def slow_setup():
    time.sleep(0.4)


def test_slow(slow_setup):
    pass


@pytest.mark.parametrize("case", range(4))
def test_quick(case):
    pass
"""


def test_a_run_records_each_tests_seconds_across_workers_and_tiers(tmp_path: Path) -> None:
    """Under pytest-xdist only the controller sees every worker's reports; a second tier adds to the file."""
    import json

    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(RECORDING_CONFTEST)
    (tmp_path / "test_recorded.py").write_text(RECORDED)
    (tmp_path / "test_other.py").write_text(FREE)
    measured = tmp_path / "logs" / "durations.json"
    for selection in ("test_recorded.py", "test_other.py"):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", selection],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT), "GPUFLEET_DURATIONS": str(measured)},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    took = json.loads(measured.read_text())
    assert took["test_recorded.py::test_slow"] >= 0.4, took
    assert {f"test_recorded.py::test_quick[{i}]" for i in range(4)} <= set(took), took
    assert len([k for k in took if k.startswith("test_other.py::")]) == 8, took
