"""The toolkit's small error taxonomy; tasks.py maps each class to an exit code, and none prints a traceback.

- ConfigError: bad input (stack file, spec, trace) -> exit 2
- ToolMissing: a missing tool or credentials -> exit 3, with what to install or set
- CheckFailed: a check that ran and found problems (preflight, verify) -> exit 1
- Interrupted: a stop signal (SIGINT, SIGTERM, SIGHUP) -> exit 128 + its number (130, 143, 129), as a shell
  reports a command a signal ended; what the command started is stopped on the way out
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Base for errors that are the user's to fix, not bugs."""

    exit_code = 1


class ConfigError(GpufleetError):
    """Bad configuration: carries every problem found, each naming its key path."""

    exit_code = 2

    def __init__(self, problems: list[str] | str, source: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        if len(self.problems) == 1:
            message = head + self.problems[0]
        else:
            listed = "\n".join(f"  - {p}" for p in self.problems)
            message = f"{head}{len(self.problems)} problems:\n{listed}"
        super().__init__(message)


class ToolMissing(GpufleetError):
    """A tool or credential the command needs is not there."""

    exit_code = 3


class CheckFailed(GpufleetError):
    """A check ran and found errors (reported before this is raised)."""

    exit_code = 1


class Interrupted(BaseException):
    """A stop signal, raised where the program is (not an Exception: nothing may swallow it), so what is in
    progress is abandoned and every `finally` on the way out stops what was started."""

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def raise_on_stop_signals() -> None:
    """Make SIGTERM and SIGHUP raise `Interrupted` in the main thread, as SIGINT raises KeyboardInterrupt."""
    import signal

    def stop(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
