"""Run the extender: ``python -m scheduler.extender [--port 8888] [--trace pods.csv] [--replicas N]``.

Serves the WSGI app with the standard library's threading WSGI server (one thread per request; the view is
locked) and keeps the view from the API server (the in-cluster service account, or $KUBECONFIG outside a cluster).
"""

from __future__ import annotations

import argparse
import logging
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server

from scheduler.extender.app import make_app
from scheduler.extender.view import ExtenderView


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - runs a server
    parser = argparse.ArgumentParser(prog="gpufleet-extender", description=__doc__)
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--host", default="", help="address to listen on (default: every interface)")
    parser.add_argument(
        "--trace", help="expected workload: a pod CSV (default: the last --window pods bound)"
    )
    parser.add_argument(
        "--replicas", type=int, default=0, help="map the trace's shares to replicas of 1/N GPU"
    )
    parser.add_argument(
        "--window", type=int, default=1000, help="recent pods that make the expected workload"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    expected = None
    if args.trace:
        from scheduler.sim import read_pods
        from scheduler.sim.deployed import as_deployed

        expected = read_pods(args.trace)
        if args.replicas:
            expected, _ = as_deployed(expected, args.replicas)
    view = ExtenderView(expected=expected, window=args.window)
    from scheduler.extender import watch

    watch.start(view)
    make_server(args.host, args.port, make_app(view), server_class=_Server).serve_forever()


if __name__ == "__main__":
    main()
