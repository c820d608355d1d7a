"""Inside the twin's namespaces: bring the twin up, serve it, run a command or wait, bring it down.

Started by `twin.launch` as `unshare --net --mount -- python -m twin.session ...` with the
listening socket it made on the machine's loopback (`--listen-fd`). Reports readiness by writing a JSON file
(kubeconfig, API server, timings, changes) the launcher waits for.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from infra.errors import GpufleetError, Interrupted
from infra.stackfile import load_stack
from twin import netns
from twin.cluster import Twin, TwinOptions
from twin.nodes import NodeCount


def parse_nodes(text: str) -> NodeCount:
    return int(text) if text.isdigit() else text  # type: ignore[return-value]


def run_command(command: str, env: dict[str, str]) -> int:
    """`--run`: the command in a process group of its own, so a stop ends it with everything it started."""
    child = subprocess.Popen(command, shell=True, env=env, start_new_session=True)
    try:
        return child.wait()
    finally:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufleet-twin-session")
    parser.add_argument("--stack-file", required=True)
    parser.add_argument("--minor", default="")
    parser.add_argument("--nodes", default="desired")
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--no-frameworks", dest="frameworks", action="store_false")
    parser.add_argument("--run", default="")
    parser.add_argument("--monitoring", action="store_true")
    parser.add_argument("--time-scale", type=float, default=1.0)
    # listening sockets on the machine's loopback for Prometheus and Alertmanager (with --monitoring)
    parser.add_argument("--prometheus-fd", type=int, default=-1)
    parser.add_argument("--alertmanager-fd", type=int, default=-1)
    entry = netns.entry_point(parser, argv)
    args, folder = entry.args, entry.folder

    def say(line: str) -> None:
        print(line, flush=True)

    twin: Twin | None = None
    try:  # a stop signal from here on, start-up's first steps included, ends in the handlers below
        netns.loopback_up()
        netns.private_etc(folder)
        spec = load_stack(Path(args.stack_file))
        options = TwinOptions(
            spec,
            folder,
            args.minor,
            parse_nodes(args.nodes),
            args.bare,
            api_port=entry.port,
            monitoring=args.monitoring,
            time_scale=args.time_scale,
            frameworks=args.frameworks,
        )
        twin = Twin(options, say)
        start = time.monotonic()
        twin.up()
        netns.forward(entry.listener, entry.port)
        assert twin.plane and twin.tools
        ready = {
            "kubeconfig": str(twin.plane.admin),
            "server": twin.plane.server,
            "pid": os.getpid(),
            "seconds": round(time.monotonic() - start, 1),
            "timings": twin.timings,
            "changes": twin.changes,
            "kubectl": str(twin.tools["kubectl"]),
        }
        if twin.chain is not None:
            for name, fd in (("prometheus", args.prometheus_fd), ("alertmanager", args.alertmanager_fd)):
                proc = twin.chain.pods.get(name)
                if proc is None or fd < 0:
                    continue
                outside = socket.socket(fileno=fd)
                netns.forward(outside, proc.port, proc.ip)
                ready[name] = f"http://127.0.0.1:{outside.getsockname()[1]}"
        netns.publish(Path(args.ready_file), ready)
        if args.run:
            env = {
                **os.environ,
                "KUBECONFIG": str(twin.plane.admin),
                "PATH": f"{twin.tools['kubectl'].parent}{os.pathsep}{os.environ.get('PATH', '')}",
            }
            return run_command(args.run, env)
        with entry.serving():
            while not entry.stop.wait(2):
                twin.check()
        return 0
    except GpufleetError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except Interrupted as stopped:
        return 128 + stopped.signum
    finally:
        if twin is not None:
            say("twin: stopping ...")
            twin.down()


if __name__ == "__main__":
    raise SystemExit(main())
