"""A child program run in the foreground that stops, with everything it started, when the command is stopped.

A terminal's Ctrl-C reaches the whole foreground process group, but SIGTERM or SIGHUP (a cancelled CI job, a
closed terminal, `kill`) reaches only the command: its children would run on, orphaned. `run_foreground` hands a
stop on to the child as the interrupt it would have had from a terminal, gives it `GRACE_S` to wind down (Ansible
prints "User interrupted execution" and stops its forks), then kills it and every process below it, and lets the
stop go on up (`infra.errors.STOPS`), so the command exits 130, 143 or 129 in about two seconds on an idle machine.

The child keeps the command's process group, terminal and output, so a prompt (an SSH host key) still reaches
the user. Linux: the process tree is read from /proc.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from infra.errors import STOPS, Interrupted

GRACE_S = 1.2  # from the interrupt to the kill: about two seconds for a whole stop on an idle machine, with room to exit


def descendants(pid: int, depth: int = 0) -> list[int]:
    """Every process below `pid` (children, theirs, ...; only `depth` levels when given), from /proc's parent
    links."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # after "pid (comm) state": the comm may hold spaces
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    level, remaining = [pid], depth or -1
    while level and remaining != 0:
        level = [child for parent in level for child in parents.get(parent, [])]
        found += level
        remaining -= 1
    return found


def stop_tree(child: subprocess.Popen[bytes], grace_s: float = GRACE_S) -> None:
    """Stop `child` and everything below it: an interrupt first (a second one, after a terminal's Ctrl-C, only
    hurries it), `grace_s` to wind down, then SIGKILL for whatever is left."""
    if child.poll() is None:
        stop_pids([child.pid], grace_s)
    child.wait()


def stop_pids(pids: Sequence[int], grace_s: float = GRACE_S) -> None:
    """Stop processes known by their ids (`stop_tree`'s way, also for processes a library started without
    handing back its Popen): an interrupt to each, `grace_s` for them to end, then SIGKILL for them and
    everything below them."""
    tree = [p for pid in pids for p in (pid, *descendants(pid))]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.05)
    left = [p for started in pids for p in descendants(started)]
    for pid in [*tree, *left]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """`pid` exists and is not a zombie left for its parent to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run_foreground(argv: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Run `argv` with the command's terminal and output and return its exit status; a stop of the command
    stops it and everything it started (`stop_tree`) before going on up."""
    child = subprocess.Popen(list(argv), env=env)
    try:
        return child.wait()
    except STOPS:
        stop_tree(child)
        raise


@contextmanager
def stops_reach_children() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP interrupt this command's children as a terminal's Ctrl-C would
    (SIGINT), then stop the command (`Interrupted`), for a child the command cannot stop itself: the Pulumi
    CLI under the Automation API, which cancels an update its own way (resources in flight finish or fail,
    the state stays consistent) while the Automation API waits for it."""
    signals = [sig for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if sig is not None]
    before = {sig: signal.getsignal(sig) for sig in signals}

    def forward(signum: int, _frame: FrameType | None) -> None:
        for pid in descendants(os.getpid(), depth=1):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGINT)
        raise Interrupted(signum)

    for sig in signals:
        signal.signal(sig, forward)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
