"""The extender's HTTP face: a WSGI application (served by :mod:`scheduler.extender.__main__`).

kube-scheduler POSTs JSON to ``<urlPrefix>/<verb>`` and treats any status other than 200 as an error
(``pkg/scheduler/extender.go``, ``HTTPExtender.send``); this app answers ``/filter`` and ``/prioritize`` (the
scheduler binds pods itself), plus ``GET /metrics`` (:mod:`scheduler.extender.metrics`), ``GET /healthz`` (liveness) and ``GET /readyz`` (ready once the first node and pod lists are both
applied; its body counts the nodes, the pods the watch has shown bound, the pods assumed on the node the
scheduler is binding them to and not yet seen bound, and the assumptions the watch moved to another node, so a test can wait until the
view has taken in what it created instead of sleeping).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler.extender import wire
from scheduler.extender.metrics import registry
from scheduler.extender.view import ExtenderView

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
MAX_BODY = 64 * 1024 * 1024  # a NodeList of 10,000 full Node objects fits well within this


def _reply(start: StartResponse, status: str, body: Any) -> Iterable[bytes]:
    data = (
        body.json_bytes() if hasattr(body, "json_bytes") else json.dumps(body, separators=(",", ":")).encode()
    )
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def _metrics_reply(metrics: CollectorRegistry, start: StartResponse) -> Iterable[bytes]:
    data = generate_latest(metrics)
    start("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(data)))])
    return [data]


def metrics_app(view: ExtenderView) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI callable of the pod-network listener (``--metrics-port``): ``GET /metrics`` and nothing else,
    so a Prometheus scrapes the view while no other pod can reach filter or prioritize."""
    metrics = registry(view)

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/").rstrip("/")
        if method == "GET" and path == "/metrics":
            return _metrics_reply(metrics, start)
        return _reply(start, "404 Not Found", {"Error": f"only GET /metrics here, not {method} {path!r}"})

    return app


def make_app(view: ExtenderView) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI callable serving ``view``."""
    metrics = registry(view)

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/").rstrip("/")
        if method == "GET" and path == "/healthz":
            return _reply(start, "200 OK", {"status": "ok"})
        if method == "GET" and path == "/readyz":
            ready = view.ready
            with view.lock:
                assumed = len(view.assumed)
                body = {"nodes": len(view.nodes), "pods": len(view.placed) - assumed, "assumed": assumed,
                        "moved": view.moved}  # fmt: skip
            return _reply(start, "200 OK" if ready else "503 Service Unavailable", body)
        if method == "GET" and path == "/metrics":
            return _metrics_reply(metrics, start)
        verbs = {"/filter", "/prioritize"}
        if path not in verbs:
            return _reply(start, "404 Not Found", {"Error": f"no such verb {path!r}"})
        if method != "POST":
            return _reply(start, "405 Method Not Allowed", {"Error": "POST only"})
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > MAX_BODY:
            return _reply(start, "413 Payload Too Large", {"Error": "request too large"})
        try:
            doc = json.loads(environ["wsgi.input"].read(length) or b"null")
            if path == "/filter":
                return _reply(start, "200 OK", view.filter(wire.parse_args(doc)))
            return _reply(start, "200 OK", view.prioritize(wire.parse_args(doc)))
        except (ValueError, wire.WireError) as exc:
            return _reply(start, "400 Bad Request", {"Error": str(exc)})

    return app


def call(app: Callable[..., Iterable[bytes]], verb: str, body: Any) -> tuple[int, Any]:
    """POST ``body`` to ``/<verb>`` of a WSGI ``app`` in-process (the simulator and tests); (status, reply)."""
    import io

    data = json.dumps(body).encode()
    status: list[str] = []

    def start(s: str, _headers: list[tuple[str, str]]) -> None:
        status.append(s)

    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": f"/{verb}",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(data)),
        "wsgi.input": io.BytesIO(data),
    }
    out = b"".join(app(environ, start))
    return int(status[0].split()[0]), json.loads(out)
