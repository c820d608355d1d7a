"""`invoke test`: the reference data is checked first (offline, a run used to fail after minutes of pip, ruff
and mypy with a raw download error and no hint), each phase announces itself, the toolchain builds in the
background and is joined before the tests that need it, and a failing tier fails the run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Exit, MockContext, Result

import tasks
from tests import phases


def no_build(_py: str) -> phases.Build:
    return phases.Build(None, Path("unused"), "cached")


def test_missing_reference_data_stops_before_lint_and_says_how_to_provide_it() -> None:
    c = MockContext(
        run={re.compile(r".*benchmarks/reference_data\.py.*"): Result(exited=2, stderr="cannot download")},
        repeat=True,
    )
    with pytest.raises(Exit) as stopped:
        phases.run(c, build=no_build)
    assert stopped.value.code == 2
    message = str(stopped.value.message)
    assert "GPUFLEET_SHARED" in message and "--mirror" in message
    commands = [call.args[0] for call in c.run.call_args_list]
    assert len(commands) == 1 and "reference_data.py" in commands[0]  # no ruff, mypy or pytest ran


def test_each_phase_is_announced_in_order_and_timed(capsys: pytest.CaptureFixture[str]) -> None:
    c = MockContext(run={re.compile(r".*"): Result(stdout="/data\n")}, repeat=True)
    phases.run(c, build=no_build)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("==> ")]
    names = [re.sub(r"^==> \[\d+/10\] (.*) \(\d+ s\)$", r"\1", line) for line in lines]
    assert names == list(phases.PHASES)
    assert [int(re.search(r"\[(\d+)/10\]", line).group(1)) for line in lines] == list(range(1, 11))  # type: ignore[union-attr]
    assert "phase times:" in out and all(f"  {name}" in out for name in phases.PHASES)
    assert all(re.search(rf"^  {re.escape(name)} +\d+ s +\d+ s CPU$", out, re.M) for name in phases.PHASES)
    commands = [call.args[0] for call in c.run.call_args_list]
    tiers = [command for command in commands if " -m pytest " in command]
    assert [(selection, workers) for _, selection, workers in phases.TIERS] == [
        ("not e2e and not toolchain and not alone", 2), ("(e2e or toolchain) and not alone", 2), ("alone", 1)]  # fmt: skip
    assert [f'-m "{t[1]}"' in command for t, command in zip(phases.TIERS, tiers, strict=True)] == [True] * 3
    assert "-n 2" in tiers[0] and "-n 2" in tiers[1] and "-n" not in tiers[2]
    assert any("mypy infra scheduler twin" in command for command in commands)


def test_a_failing_tier_fails_the_run_after_both_tiers_ran() -> None:
    c = MockContext(
        run={
            re.compile(r'.*pytest -m "not e2e.*'): Result(exited=1),
            re.compile(r".*"): Result(stdout="/data\n"),
        },
        repeat=True,
    )
    with pytest.raises(Exit) as stopped:
        phases.run(c, build=no_build)
    assert stopped.value.code == 1
    assert sum(" -m pytest " in call.args[0] for call in c.run.call_args_list) == 3


def test_a_selection_that_one_tier_does_not_reach_is_not_a_failure() -> None:
    """`invoke test --pytest-args '-k spec'` selects no test of the twin tier: pytest's exit 5 there is fine."""
    c = MockContext(
        run={
            re.compile(r'.*pytest -m "(\(e2e|alone).*'): Result(exited=phases.NO_TESTS),
            re.compile(r".*"): Result(stdout="/d\n"),
        },
        repeat=True,
    )
    phases.run(c, "-k spec", build=no_build)


def test_the_task_is_the_phases() -> None:
    assert "tests/phases.py" in (tasks.test.__doc__ or "")


def test_a_phase_is_charged_the_cpu_its_processes_used() -> None:
    """The CPU column is what the phase's child processes burnt, so a phase that waits shows little CPU."""
    clock = phases.Clock()
    clock.phase("mypy")
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"],
                   check=True)  # fmt: skip
    clock.phase("import contracts")
    waited = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.4)"])
    waited.wait()
    clock.close()
    assert clock.cpu["mypy"] >= 0.35 and clock.cpu["import contracts"] < 0.3, clock.cpu
