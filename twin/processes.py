"""Starting and stopping the twin's component processes, and waiting until each one serves.

Each process gets its own session (process group), its own log file, and is stopped by its own process group
(SIGTERM, then SIGKILL after a grace period), never by name, in the reverse order of starting. Each is also
started with a parent-death signal (`setpriv --pdeathsig KILL`, util-linux; prctl(2) PR_SET_PDEATHSIG): when the
program that started it ends without stopping it (killed, crashed), the kernel ends it too, so no component
outlives its twin. A process that exits while the twin waits for it fails the start at once with the end of
its log, instead of a timeout.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infra.errors import CheckFailed

STOP_GRACE_S = 10.0
# The Go collector's target for every program the twin runs (its components, kubectl, helm, the Pulumi engine
# and provider): a start is mostly allocation (CRD schemas converted, CEL rules compiled, objects decoded and
# encoded), and at Go's default of 100 the collector took about 40 % of the API server's CPU. At 400 a metal
# twin's start costs 23 s of CPU instead of 33 s, for 1.5 GiB more memory in its API server (1.3 -> 2.8 GiB);
# what the components decide does not depend on it. A GOGC the user set wins.
GO_GC_PERCENT = "400"


def go_runtime_env() -> dict[str, str]:
    """This process's environment with the twin's GOGC, unless it names its own."""
    return {"GOGC": GO_GC_PERCENT, **os.environ}


def with_parent_death(argv: Sequence[str]) -> list[str]:
    """`argv` run so that it is killed when the thread that starts it ends (without util-linux's setpriv, as is)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str] | None = None, cwd: Path | None = None) -> Process:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                with_parent_death(self.argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        _signal_group(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            _signal_group(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


@dataclass
class Supervisor:
    """The twin's processes, in start order; `stop_all` stops them newest first."""

    folder: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    processes: list[Process] = field(default_factory=list)

    def start(self, name: str, argv: Sequence[str | Path], env: dict[str, str] | None = None) -> Process:
        proc = Process(name, [str(a) for a in argv], self.folder / "logs" / f"{name}.log")
        proc.start({**self.env, **(env or {})}, cwd=self.folder)
        self.processes.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()

    def check_alive(self) -> Process | None:
        """The first process that has exited, if any."""
        return next((p for p in self.processes if not p.running), None)


def wait_until(
    check: Callable[[], bool], what: str, proc: Process | None, timeout: float = 90.0, every: float = 0.2
) -> None:
    """Poll `check` until it is true; fail at once if `proc` exits, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and not proc.running:
            code = proc.popen.returncode if proc.popen else "?"
            raise CheckFailed(f"{proc.name} exited ({code}) while waiting for {what}:\n{proc.log_tail()}")
        try:
            if check():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            tail = f":\n{proc.log_tail()}" if proc else ""
            raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}{tail}")
        time.sleep(every)


# Outgoing connections take their local port from the namespace's ephemeral range, so a listening port picked
# from that range can be taken between picking it and the component binding it (an API server's connection to
# etcd once took the controller-manager's port). Inside the twin's own network namespace the ephemeral range is
# moved to the IANA dynamic ports (twin.netns.loopback_up) and listeners are picked below them.
EPHEMERAL_PORTS = (49152, 65535)
LISTEN_PORTS = (20000, 49151)


# Ports this process has handed out: a port is free when picked but bound only once its component starts, so
# without this a later pick could return it again (Kueue once failed to bind its health port that way).
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 below the twin's ephemeral range (the twin's own network namespace has
    nothing else in it), never one this process has handed out before."""
    for _ in range(1000):
        port = random.randint(*LISTEN_PORTS)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {LISTEN_PORTS[0]}-{LISTEN_PORTS[1]} on 127.0.0.1")


def https_ok(
    url: str, ca: Path | None, cert: tuple[Path, Path] | None = None, token: str | None = None
) -> bool:
    """GET `url` over TLS verified by `ca` (None: a component's self-signed serving certificate on loopback,
    not verified), optionally with a client certificate or bearer token: 200?"""
    context = ssl._create_unverified_context() if ca is None else ssl.create_default_context(cafile=str(ca))
    if cert:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as reply:
            return bool(reply.status == 200)
    except urllib.error.HTTPError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return bool(reply.status == 200)
    except urllib.error.HTTPError:
        return False


def tcp_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
