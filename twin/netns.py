"""The twin's own network (and mount) namespace: nothing it runs can reach past loopback.

The twin runs inside `unshare --net --mount` (util-linux): a network namespace whose only interface is `lo`,
so every address a real cluster would dial and the twin must not (Service ClusterIPs in 10.96.0.0/16, kwok's
pod IPs in 10.244.0.0/16 and node IPs in 10.240.0.0/16, webhook or APIService Services) fails at once with
ENETUNREACH instead of leaving the machine. Root gets the namespaces directly; another user gets them inside
a user namespace (`--map-root-user`), where the kernel allows it.

The API server is still reachable from the machine's own loopback: the launcher binds a listening socket on
127.0.0.1 *before* the namespace exists and hands it to the twin, whose forwarder accepts on it (an accepted
connection belongs to the listener's namespace) and connects to the API server on the same port inside. So
one kubeconfig, `https://127.0.0.1:<port>`, works inside the twin and outside it. Each program the launcher
starts inside (`twin.session`, `twin.replay`) begins with `entry_point`: the arguments every such program
takes, the handed-down listener, a stop when the launcher ends (a pipe it holds), and SIGTERM, SIGINT and
SIGHUP turned into a stop.

The mount namespace gives Kueue the fixed certificate folder it insists on (/etc/kueue/metrics/certs)
without touching the machine's /etc: /etc is overlaid with a writable layer in the twin's folder.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.errors import CheckFailed, Interrupted, ToolMissing
from twin.processes import EPHEMERAL_PORTS, go_runtime_env

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
NAMESPACE_HINT = (
    "the twin runs in a network namespace of its own: run it as root, or enable unprivileged user "
    "namespaces (sysctl kernel.unprivileged_userns_clone=1), with util-linux's `unshare` installed"
)


def enter(argv: Sequence[str]) -> list[str]:
    """The command line that runs `argv` in new network and mount namespaces."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise ToolMissing(NAMESPACE_HINT)
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    return [unshare, "--net", "--mount", "--propagation", "private", *user, "--", *argv]


def check_namespaces() -> None:
    """Fail with what to do (exit 3) when this machine cannot give the twin its own namespaces."""
    try:
        done = subprocess.run(enter(["true"]), capture_output=True, text=True, timeout=30, check=False)
    except OSError as exc:
        raise ToolMissing(f"{NAMESPACE_HINT} ({exc})") from None
    if done.returncode != 0:
        raise ToolMissing(f"{NAMESPACE_HINT} (unshare: {done.stderr.strip()})")


def loopback_up() -> None:
    """Bring `lo` up (a new network namespace starts with it down): SIOCSIFFLAGS |= IFF_UP; and move the
    namespace's ephemeral port range above the listeners' (twin.processes.free_port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
    # The namespace's own sysctl: outgoing connections' local ports stay out of the listeners' range.
    with contextlib.suppress(OSError):
        Path("/proc/sys/net/ipv4/ip_local_port_range").write_text(
            f"{EPHEMERAL_PORTS[0]} {EPHEMERAL_PORTS[1]}"
        )


def interfaces() -> list[str]:
    """The network interfaces this process sees (inside the twin: only `lo`)."""
    return sorted(name for _, name in socket.if_nameindex())


def private_etc(folder: Path) -> None:
    """Overlay /etc with a writable layer under `folder` (inside the mount namespace only)."""
    upper, work = folder / "etc-upper", folder / "etc-work"
    for path in (upper, work):
        path.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir=/etc,upperdir={upper},workdir={work}"
    done = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, "/etc"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise ToolMissing(f"could not give the twin a private /etc: {done.stderr.strip()}")


def listen(port: int = 0) -> socket.socket:
    """A listening socket on the machine's loopback (created before the twin's namespace exists)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


@dataclass
class EntryPoint:
    """What a program started inside the namespace begins with: its parsed arguments, its folder, the listener
    the launcher made on the machine's loopback (and that listener's port), and the event a stop signal sets.

    While `interrupting` is on (start-up, a command running), a stop also raises `Interrupted` in the main
    thread, once: a long start-up is not finished first, and the components already started are stopped."""

    args: argparse.Namespace
    folder: Path
    listener: socket.socket
    port: int
    stop: threading.Event
    interrupting: bool = True
    raised: bool = False

    def on_stop(self, signum: int) -> None:
        self.stop.set()
        if self.interrupting and not self.raised:
            self.raised = True
            raise Interrupted(signum)

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """From here on a stop only sets the event: the program's own loop notices it and stops in order, and
        a second signal while it stops does not cut the stopping short."""
        self.interrupting = False
        if self.stop.is_set():
            raise Interrupted(signal.SIGTERM)
        yield


def watch_parent(fd: int) -> None:
    """The launcher holds the write end of a pipe whose read end is `fd`: when the launcher ends, however it ends
    (a SIGKILL included), reading gives EOF and this process is sent SIGTERM, which stops the twin."""

    def wait() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 1):
                pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="launcher-watch", daemon=True).start()


def entry_point(parser: argparse.ArgumentParser, argv: list[str] | None) -> EntryPoint:
    """Parse `argv` with `parser` plus the arguments the launcher always passes (`--folder`, `--listen-fd`,
    `--ready-file`, `--parent-fd`), take over the listening socket handed down as `--listen-fd`, stop when the
    launcher ends, and turn SIGTERM, SIGINT and SIGHUP into a stop (see `EntryPoint`)."""
    parser.add_argument("--folder", required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--parent-fd", type=int, default=-1, help="read end of the launcher's pipe")
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.listen_fd)
    entry = EntryPoint(args, Path(args.folder), listener, int(listener.getsockname()[1]), threading.Event())
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: entry.on_stop(signum))
    if args.parent_fd >= 0:
        watch_parent(args.parent_fd)
    return entry


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def forward(listener: socket.socket, target_port: int, target_host: str = "127.0.0.1") -> threading.Thread:
    """Accept on `listener` (the machine's loopback) and relay each connection to `target_host`:`target_port`
    in this process's namespace (its loopback, or a pod IP routed to it); bytes only (TLS goes end to end)."""

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((target_host, target_port), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, name=f"forward-{target_port}", daemon=True)
    thread.start()
    return thread


# ---- on the machine: starting a program inside, and stopping it -------------------------------------------


@dataclass
class Inside:
    """A program the launcher started inside the namespaces (`twin.session`, `twin.replay`): its process (the
    leader of its own process group) and the write end of the pipe whose closing stops it."""

    process: subprocess.Popen[bytes]
    pipe: int

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and the pipe closed; after `timeout` SIGKILL to its process group. Its components die with it
        (each started with a parent-death signal, `twin.processes`)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
        if self.pipe >= 0:
            with contextlib.suppress(OSError):
                os.close(self.pipe)
            self.pipe = -1
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        return int(self.process.returncode or 0)


def spawn(argv: Sequence[str], fds: Sequence[int], stdout: Any = None) -> Inside:
    """Start `argv` (a program that begins with `entry_point`) inside new namespaces, handing it `fds` and the
    read end of a pipe this process keeps the write end of: it stops when this process ends, however it ends. It
    and all it starts get the twin's Go runtime settings (`go_runtime_env`)."""
    read, write = os.pipe()  # the write end is not inheritable: no other child of this process holds it
    try:
        process = subprocess.Popen(
            enter([*argv, "--parent-fd", str(read)]), pass_fds=(*fds, read), start_new_session=True,
            stdout=stdout, stderr=stdout, env=go_runtime_env(),
        )  # fmt: skip
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return Inside(process, write)


def publish(path: Path, value: Any) -> None:
    """Write `value` as JSON to `path` whole or not at all (a file beside it, then rename(2)): the launcher polls
    for the twin's ready file and reads it the moment it appears, and a file written in place may then still be
    empty."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(value, indent=2))
    os.replace(partial, path)


def live_program(folder: Path) -> int | None:
    """The pid of a twin program that is running for `folder` (its `ready.json` or `session.json` names it and
    that process is alive and is one), else None: such a folder is never deleted under it."""
    for name in ("ready.json", "session.json"):
        try:
            pid = int(json.loads((folder / name).read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"twin.session" in command or b"twin.replay" in command:
            return pid
    return None


def clear_folder(folder: Path) -> None:
    """Start from an empty folder, unless a twin still runs from it (exit 1, naming it)."""
    pid = live_program(folder)
    if pid is not None:
        raise CheckFailed(f"a twin still runs from {folder} (pid {pid}); stop it first (kill {pid})")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
