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
takes, the handed-down listener, and SIGTERM/SIGINT turned into a stop event.

The mount namespace gives Kueue the fixed certificate folder it insists on (/etc/kueue/metrics/certs)
without touching the machine's /etc: /etc is overlaid with a writable layer in the twin's folder.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.errors import ToolMissing

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
    """Bring `lo` up (a new network namespace starts with it down): SIOCSIFFLAGS |= IFF_UP."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


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


@dataclass(frozen=True)
class EntryPoint:
    """What a program started inside the namespace begins with: its parsed arguments, its folder, the listener
    the launcher made on the machine's loopback (and that listener's port), and the event SIGTERM or SIGINT sets."""

    args: argparse.Namespace
    folder: Path
    listener: socket.socket
    port: int
    stop: threading.Event


def entry_point(parser: argparse.ArgumentParser, argv: list[str] | None) -> EntryPoint:
    """Parse `argv` with `parser` plus the arguments the launcher always passes (`--folder`, `--listen-fd`,
    `--ready-file`), take over the listening socket handed down as `--listen-fd`, and make SIGTERM and SIGINT
    set the stop event instead of ending the process (the caller then brings its components down)."""
    parser.add_argument("--folder", required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--ready-file", required=True)
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.listen_fd)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return EntryPoint(args, Path(args.folder), listener, int(listener.getsockname()[1]), stop)


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
