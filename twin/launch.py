"""`invoke twin`: check everything that can be checked before a process starts, then start the twin in its
own namespaces (`twin.session`) and serve it, run a command in it, or hand back a handle (tests).

The order is the user's: a bad stack file or `--minor` (exit 2), a missing toolchain or namespace support
(exit 3), a twin already up (exit 1) — all before anything starts. One twin at a time per lock file
(`<cache>/twin.lock`, or `GPUFLEET_TWIN_LOCK`): the lock is held for the twin's whole life, and names the
running twin for whoever finds it taken.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from infra.aws.rules import eks_minor_problem
from infra.errors import CheckFailed, ConfigError
from infra.pools import uses_karpenter
from infra.spec import ClusterSpec
from infra.versions import TWIN_MINORS
from twin import netns
from twin.toolchain.build import cache_root, locate

LOCK_ENV = "GPUFLEET_TWIN_LOCK"
READY_TIMEOUT_S = 600.0
NODE_CHOICES = "desired (default), min, max or a number of nodes per pool"


def lock_path() -> Path:
    return Path(os.environ.get(LOCK_ENV) or cache_root() / "twin.lock")


def time_scale_value(text: str) -> float | None:
    """`--time-scale`: a number above 0 and at most 1 (None when it is not)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value <= 1 else None


def check_options(spec: ClusterSpec, minor: str, nodes: str, time_scale: str = "1") -> None:
    """Bad options are bad input (exit 2), found before anything starts."""
    problems = []
    if time_scale_value(time_scale) is None:
        problems.append(f"--time-scale: {time_scale!r} is not a number above 0 and at most 1")
    wanted = minor or spec.cluster.kubernetes_version
    key = "--minor" if minor else "gpufleet:cluster.kubernetesVersion"
    if wanted not in TWIN_MINORS:
        problems.append(f"{key}: the twin runs Kubernetes {', '.join(TWIN_MINORS)}; got {wanted!r}")
    elif spec.platform == "aws" and (eks := eks_minor_problem(wanted, key)):
        problems.append(eks)  # the twin is the stack's cluster: an aws stack's runs on EKS, with EKS pins
    if nodes not in ("desired", "min", "max") and not nodes.isdigit():
        problems.append(f"--nodes: {nodes!r} is not {NODE_CHOICES}")
    if problems:
        raise ConfigError(problems)


def take_lock(stack: str, path: Path) -> IO[str]:
    """Hold the one-twin-at-a-time lock for `stack`, or say which twin holds it (exit 1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        try:
            held = json.loads(handle.read() or "{}")
        except ValueError:
            held = {}
        handle.close()
        who = f"stack {held.get('stack', '?')}, pid {held.get('pid', '?')}, kubeconfig {held.get('kubeconfig', '?')}"
        raise CheckFailed(
            f"a twin is already up ({who}); use it, or stop it first (Ctrl-C where it runs, or kill {held.get('pid', '<pid>')})"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"stack": stack, "pid": os.getpid()}))
    handle.flush()
    return handle


@dataclass
class RunningTwin:
    """A twin started by `start`: its session (inside the namespaces), where its kubeconfig is, and how it came up."""

    session: netns.Inside
    folder: Path
    info: dict[str, Any] = field(default_factory=dict)
    lock: IO[str] | None = None

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.session.process

    @property
    def kubeconfig(self) -> Path:
        return Path(self.info["kubeconfig"])

    def stop(self, timeout: float = 60) -> int:
        """Stop the session (and with it every component), then release the lock."""
        try:
            return self.session.stop(timeout)
        finally:
            if self.lock is not None:
                self.lock.close()
                self.lock = None


def start(
    stack_file: Path,
    spec: ClusterSpec,
    folder: Path,
    *,
    minor: str = "",
    nodes: str = "desired",
    bare: bool = False,
    run: str = "",
    monitoring: bool = False,
    time_scale: str = "1",
    frameworks: bool = True,
    say: Callable[[str], None] = print,
    stdout: int | IO[bytes] | None = None,
    lock: Path | None = None,
) -> RunningTwin:
    """Check, lock, and start a twin; returns once it is up (or, with `run`, once it has started). Interrupted
    at any point (Ctrl-C, a stop signal the caller turns into an exception), it stops what it started."""
    check_options(spec, minor, nodes, time_scale)
    locate(
        minor or spec.cluster.kubernetes_version, say, monitoring=monitoring, karpenter=uses_karpenter(spec)
    )  # exit 3 before anything starts
    netns.check_namespaces()
    held = take_lock(spec.stack, lock or lock_path())
    try:
        netns.clear_folder(folder)
    except BaseException:
        held.close()
        raise
    ready = folder / "ready.json"
    listener = netns.listen()
    port = listener.getsockname()[1]  # the API server's port on this machine's loopback
    argv = [sys.executable, "-m", "twin.session", "--stack-file", str(stack_file.resolve()),
            "--folder", str(folder.resolve()), "--listen-fd", str(listener.fileno()), "--ready-file", str(ready),
            "--minor", minor, "--nodes", nodes, "--time-scale", time_scale]  # fmt: skip
    if bare:
        argv.append("--bare")
    if not frameworks:
        argv.append("--no-frameworks")
    if run:
        argv += ["--run", run]
    extra: list[socket.socket] = []
    if monitoring:
        extra = [netns.listen(), netns.listen()]
        argv += ["--monitoring", "--prometheus-fd", str(extra[0].fileno()),
                 "--alertmanager-fd", str(extra[1].fileno())]  # fmt: skip
    try:
        session = netns.spawn(argv, (listener.fileno(), *(s.fileno() for s in extra)), stdout)
    except BaseException:
        held.close()
        raise
    finally:
        listener.close()
        for sock in extra:
            sock.close()
    twin = RunningTwin(session, folder, lock=held)
    (folder / "session.json").write_text(json.dumps({"pid": session.process.pid, "port": port}))
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.is_file():
            if session.process.poll() is not None or time.monotonic() > deadline:
                code = twin.stop()
                raise CheckFailed(f"the twin did not come up (exit {code}); logs in {folder / 'logs'}")
            time.sleep(0.2)
        twin.info = json.loads(ready.read_text())
    except BaseException:
        twin.stop()
        raise
    held.seek(0)
    held.truncate()
    held.write(
        json.dumps({"stack": spec.stack, "pid": session.process.pid, "kubeconfig": twin.info["kubeconfig"]})
    )
    held.flush()
    return twin


def serve(twin: RunningTwin, say: Callable[[str], None] = print) -> int:
    """Print how to reach the twin and wait until it fails or the caller is interrupted (then it is stopped)."""
    info = twin.info
    say(f"twin is up in {info['seconds']:.0f} s: {info['server']}")
    say(f"  export KUBECONFIG={info['kubeconfig']}")
    say(f"  kubectl get nodes        (kubectl {Path(info['kubectl']).parent} matches the twin's minor)")
    for name in ("prometheus", "alertmanager"):
        if name in info:
            say(f"  {name}: {info[name]}")
    say("Ctrl-C stops it.")
    try:
        return twin.process.wait()
    finally:
        twin.stop()


def finish(twin: RunningTwin) -> int:
    """`--run`: wait for the command to end in the twin, then stop the twin; the command's exit status."""
    try:
        return twin.process.wait()
    finally:
        twin.stop()
