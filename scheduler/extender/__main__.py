"""Run the extender: ``python -m scheduler.extender [--port 8888] [--trace pods.csv] [--replicas N] [--pools A,B]
[--dra-shares] [--metrics-port 8889]``.

Serves the WSGI app with the standard library's threading WSGI server (one thread per request; the view is
locked) and keeps the view from the API server (the in-cluster service account, or $KUBECONFIG outside a cluster).
"""

from __future__ import annotations

import argparse
import logging
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server

from scheduler.extender.app import make_app, metrics_app
from scheduler.extender.view import ExtenderView


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def probe(port: int, path: str) -> int:
    """The container's exec probe: the extender listens on the pod's loopback, which HTTP probes cannot reach."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=4) as reply:
            return 0 if reply.status == 200 else 1
    except (urllib.error.URLError, OSError):
        return 1


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
    parser.add_argument(
        "--pools",
        help="comma-separated gpufleet.io/pool labels whose GPU pods make the expected workload "
        "(default: every node with whole or time-sliced GPUs)",
    )
    parser.add_argument(
        "--shadow",
        action="store_true",
        help="score without deciding: prioritize gives every node 0 (the profile places), /metrics counts "
        "where FGD would have placed",
    )
    parser.add_argument(
        "--dra-shares",
        action="store_true",
        help="also watch ResourceSlices and ResourceClaims and score pods that claim GPU shares by FGD over "
        "the nodes' devices' free shares",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="also serve GET /metrics (only) on this port, for a Prometheus (0: none)",
    )
    parser.add_argument(
        "--metrics-host", default="", help="address of the --metrics-port listener (default: every interface)"
    )
    parser.add_argument(
        "--probe", metavar="PATH", help="GET PATH (/healthz, /readyz) on 127.0.0.1:PORT; exit 0 on 200"
    )
    args = parser.parse_args(argv)
    if args.probe:
        raise SystemExit(probe(args.port, args.probe))
    logging.basicConfig(level=logging.INFO)
    expected = None
    if args.trace:
        from scheduler.sim import read_pods
        from scheduler.sim.deployed import as_deployed

        expected = read_pods(args.trace)
        if args.replicas:
            expected, _ = as_deployed(expected, args.replicas)
    pools = [p for p in args.pools.split(",") if p] if args.pools is not None else None
    view = ExtenderView(
        expected=expected, window=args.window, pools=pools, shadow=args.shadow, dra_shares=args.dra_shares
    )
    from scheduler.extender import watch

    watch.start(view)
    if args.metrics_port:
        scrape = make_server(args.metrics_host, args.metrics_port, metrics_app(view), server_class=_Server)
        threading.Thread(target=scrape.serve_forever, name="metrics", daemon=True).start()
    make_server(args.host, args.port, make_app(view), server_class=_Server).serve_forever()


if __name__ == "__main__":
    main()
