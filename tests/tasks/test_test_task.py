"""`invoke test` checks for the reference data first: offline, it stops at once with a hint, not after ten
minutes of pip, ruff and mypy with a raw download error."""

from __future__ import annotations

import re

import pytest
from invoke import Exit, MockContext, Result

import tasks


def test_missing_reference_data_stops_before_lint_and_says_how_to_provide_it() -> None:
    c = MockContext(
        run={re.compile(r".*benchmarks/reference_data\.py.*"): Result(exited=2, stderr="cannot download")},
        repeat=True,
    )
    with pytest.raises(Exit) as stopped:
        tasks.test(c)
    assert stopped.value.code == 2
    message = str(stopped.value.message)
    assert "GPUFLEET_SHARED" in message and "--mirror" in message
    commands = [call.args[0] for call in c.run.call_args_list]
    assert len(commands) == 1 and "reference_data.py" in commands[0]  # no ruff, mypy or pytest ran


def test_each_phase_is_announced_in_order(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`invoke test` runs for half an hour; each phase gets a line with its
    number and the time so far, so a log shows where a run is and where it stopped."""
    monkeypatch.setattr(tasks, "_twin_toolchain", lambda c, py: None)
    c = MockContext(run={re.compile(r".*"): Result(stdout="/data\n")}, repeat=True)
    tasks.test(c)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("==> ")]
    names = [re.sub(r"^==> \[\d/7\] (.*) \(\d+ s\)$", r"\1", line) for line in lines]
    assert names == [
        "reference data",
        "ruff check",
        "ruff format",
        "mypy",
        "import contracts",
        "twin toolchain",
        "pytest",
    ]
    assert [int(re.search(r"\[(\d)/7\]", line).group(1)) for line in lines] == list(range(1, 8))  # type: ignore[union-attr]
