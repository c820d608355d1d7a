"""The toolkit's small error taxonomy; tasks.py maps each class to an exit code, and none prints a traceback.

- ConfigError: bad input (stack file, spec, trace, an output folder that cannot be written) -> exit 2
- ToolMissing: a missing tool or credentials -> exit 3, with what to install or set
- CheckFailed: a check that ran and found problems (preflight, verify) -> exit 1
- Interrupted: a stop signal (SIGINT, SIGTERM, SIGHUP) -> exit 128 + its number (130, 143, 129), as a shell
  reports a command a signal ended; what the command started is stopped on the way out, and the message
  says what was left half-done (`on_stop`)
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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


STOPS = (KeyboardInterrupt, Interrupted)  # what a stop (Ctrl-C, SIGTERM, SIGHUP) raises


@contextmanager
def on_stop(note: str) -> Iterator[None]:
    """If the command is stopped inside this block, say `note` (what was left half-done, what to do) when it
    exits: the note rides on the exception (PEP 678) up to the command line's one message."""
    try:
        yield
    except STOPS as stop:
        stop.add_note(note)
        raise


@contextmanager
def writing(folder: Path, fix: str = "pass --out DIR to write to a folder you can write") -> Iterator[None]:
    """Writing a command's outputs under `folder`: a file system that refuses (a read-only checkout or cache
    mount, a folder of someone else's, `--out /proc/x`) is one line naming the path and the reason, exit 2 like
    any other bad input, since the fix is an option of the command line (`--out DIR`), not a tool to install."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or folder
        raise ConfigError(f"cannot write {where}: {exc.strerror or exc}; {fix}") from None


def stop_message(stop: BaseException) -> tuple[str, int]:
    """The one message and the exit code of a stopped command: what stopped it, then its notes."""
    if isinstance(stop, Interrupted):
        what, code = str(stop), stop.exit_code
    else:
        what, code = "stopped by SIGINT (Ctrl-C)", 130
    notes = getattr(stop, "__notes__", None) or ["nothing was left half-done"]
    return f"{what}: {'; '.join(notes)}", code


def raise_on_stop_signals() -> None:
    """Make SIGTERM and SIGHUP raise `Interrupted` in the main thread, as SIGINT raises KeyboardInterrupt."""
    import signal

    def stop(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
