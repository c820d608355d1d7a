"""What tests in every room share: a prerequisite that must hold, and a wait on something observable.

`require`: a test whose prerequisite is missing (a built toolchain, root, a distribution package, the reference
data) fails under `CI=true`, because the tier must run there and a CI run must not pass by skipping, and is
skipped elsewhere with what to install or run.

`eventually`: polls a check until it returns something truthy or its deadline passes, then fails naming what
it waited for and the check's last answer. The twin's own waits (`twin.processes.wait_until`) also watch a
process and raise the product's `CheckFailed`; a test's waits assert.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, NoReturn, overload

import pytest


@overload
def require(condition: str) -> NoReturn: ...
@overload
def require(condition: bool, why: str) -> None: ...
def require(condition: bool | str, why: str = "") -> None:
    """Stop the test unless `condition` holds: `pytest.fail(why)` under CI, `pytest.skip(why)` elsewhere.

    `require(ok, why)` checks; `require(why)` alone stops at once (the caller has already found the
    prerequisite missing)."""
    if isinstance(condition, str):
        why = condition
    elif condition:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


def eventually(check: Callable[[], Any], what: str, timeout: float = 60, every: float = 0.5) -> Any:
    """Poll until `check()` returns something truthy and return it; after `timeout` seconds fail naming
    `what` and the last answer. An exception `check` raises (an assertion, say) fails at once."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
