"""`invoke twin` stops with its command: Ctrl-C (SIGINT), SIGTERM and SIGHUP during start-up, during `--run`
and while serving each stop every component and release the lock, and the command exits 128 + the signal's
number; a launcher killed outright (SIGKILL) takes its twin with it. Afterwards no process of the twin is left,
and none of the processes that listened on its port on the machine's loopback still does."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import toolchain

pytestmark = pytest.mark.xdist_group("build-metal-twin")

STACK = "metal"
FOLDER = ROOT / "build" / STACK / "twin"
SLEEPER = "import time; time.sleep(600)"


@pytest.fixture(autouse=True)
def no_twin_before_or_after() -> Iterator[None]:
    """Each case starts with no twin of the folder running and leaves none, whatever it asserted: a failed case
    must not make the next one fail."""
    sweep()
    yield
    sweep()


def sweep() -> None:
    for line in twin_processes("gpufleet-signal-test-"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)


def launch(tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    """`invoke twin --stack metal --bare --no-frameworks ...` as a user starts it, with a lock of the test's
    own."""
    env = {**os.environ, "GPUFLEET_TWIN_LOCK": str(tmp / "lock")}
    log = (tmp / "invoke.log").open("wb")
    argv = [sys.executable, "-m", "invoke", "twin", "--stack", STACK, "--bare", "--no-frameworks", *extra]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def twin_processes(marker: str) -> list[str]:
    """Every process whose command line names the twin's folder (the session and each component name it in
    their arguments) or `marker` (the `--run` command's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(FOLDER) in command or marker in command:
            found.append(f"{entry.name}: {command[:160]}")
    return found


def listeners(port: int) -> list[int]:
    """The processes with a listening TCP socket on `port` of this machine's loopback (proc(5): /proc/net/tcp's
    `st` 0A is LISTEN; a socket's inode is the target `socket:[inode]` of an fd of its process)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    found = []
    for entry in Path("/proc").iterdir() if inodes else []:
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
    return found


def released(port: int, holders: set[int]) -> bool:
    """None of `holders`, the processes that listened on the twin's API server port while it served, listens on
    it any more. A bind test would not do: once released, the port is in the ephemeral range the other worker's
    twins and clients draw from, and a stranger's socket on it says nothing about this twin."""
    return not set(listeners(port)) & holders


def session_port() -> int:
    return int(json.loads((FOLDER / "session.json").read_text())["port"])


def ours(name: str, invoked: subprocess.Popen[bytes]) -> bool:
    """The folder's `name` (session.json, ready.json) was written for the session `invoked` started (an earlier
    twin's file in the same folder says nothing about this one)."""
    try:
        pid = int(json.loads((FOLDER / name).read_text())["pid"])
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError, KeyError):
        return False
    return int(stat.rsplit(")", 1)[1].split()[1]) == invoked.pid  # the parent's pid, after the command's name


@pytest.mark.parametrize("phase", ["start-up", "run", "serving"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_at_any_phase_stops_every_component(
    tmp_path: Path, phase: str, sig: signal.Signals
) -> None:
    toolchain("1.35")
    marker = f"gpufleet-signal-test-{tmp_path.name}"
    extra = ["--run", f"{sys.executable} -c '{SLEEPER}' {marker}"] if phase == "run" else []
    invoked = launch(tmp_path, *extra)
    try:
        if phase == "start-up":  # the session has started components, and is not up yet
            eventually(
                lambda: ours("session.json", invoked) and (FOLDER / "logs" / "kube-apiserver.log").is_file(),
                "the API server started",
                120,
                0.1,
            )
            assert not (FOLDER / "ready.json").is_file()
        else:
            eventually(lambda: ours("ready.json", invoked), "the twin up", 300, 0.2)
        if phase == "run":
            running = lambda: [p for p in twin_processes(marker) if "invoke" not in p and "sh -c" not in p]  # noqa: E731
            eventually(running, "the --run command", 60, 0.1)
        port = session_port()
        holders = set(listeners(port))
        assert holders, f"nothing listens on the twin's port {port}"
        invoked.send_signal(sig)
        code = invoked.wait(120)
    finally:
        if invoked.poll() is None:
            invoked.kill()
    said = (tmp_path / "invoke.log").read_text()
    assert code == 128 + sig, said
    assert eventually(lambda: not twin_processes(marker), "no twin process left", 60, 0.2)
    assert released(port, holders), listeners(port)
    again = subprocess.run([sys.executable, "-c", (
        "import sys; from pathlib import Path; from twin import launch;"
        f"launch.take_lock('{STACK}', Path('{tmp_path / 'lock'}')).close()")],
        cwd=ROOT, capture_output=True, text=True, check=False)  # fmt: skip
    assert again.returncode == 0, f"the lock is still held: {again.stderr}"


def test_a_killed_launcher_takes_its_twin_with_it_and_its_folder_is_safe_meanwhile(tmp_path: Path) -> None:
    """SIGKILL leaves the launcher no say: the session sees the pipe the launcher held close and stops. While the
    twin runs, a second `invoke twin` with another lock is refused (exit 1, naming it) and deletes nothing."""
    toolchain("1.35")
    invoked = launch(tmp_path)
    try:
        eventually(lambda: ours("ready.json", invoked), "the twin up", 300, 0.2)
        port = session_port()
        holders = set(listeners(port))
        assert holders, f"nothing listens on the twin's port {port}"
        pid = json.loads((FOLDER / "ready.json").read_text())["pid"]
        second = subprocess.run(
            [sys.executable, "-m", "invoke", "twin", "--stack", STACK, "--bare", "--run", "true"], cwd=ROOT,
            env={**os.environ, "GPUFLEET_TWIN_LOCK": str(tmp_path / "other.lock")}, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"pid {pid}" in second.stderr and (FOLDER / "ready.json").is_file()
        invoked.send_signal(signal.SIGKILL)
        invoked.wait(30)
    finally:
        if invoked.poll() is None:
            invoked.kill()
    assert eventually(lambda: not twin_processes("never-matches"), "no twin process left", 90, 0.2)
    assert released(port, holders), listeners(port)
