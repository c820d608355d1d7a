"""`invoke test` checks for the reference data first (first-use review, M6: offline, it failed after 10.5
minutes of pip, ruff and mypy with a raw download error and no hint)."""

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
