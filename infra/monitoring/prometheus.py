"""A small Prometheus HTTP API client (GET /api/v1/query and /api/v1/query_range) for `invoke usage`.

Standard library only: two read-only endpoints do not justify a dependency. An unreachable server is the user's
to fix (port-forward, URL), so it raises `PrometheusUnreachable` (exit 3) with what to do; a query Prometheus
rejects is reported with the query.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from infra.errors import ConfigError, GpufleetError, ToolMissing

Series = tuple[dict[str, str], list[tuple[float, float]]]


class PrometheusUnreachable(ToolMissing):
    """No Prometheus answered at the URL (exit 3)."""


class QueryRejected(GpufleetError):
    """Prometheus answered but refused a query (too many points, an unsupported function)."""


class Prometheus:
    def __init__(self, url: str, timeout_s: float = 60) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            # Bad input, not an unreachable server: exit 2, naming the flag.
            raise ConfigError(
                f"--prometheus: {url!r} is not an http(s) URL; give the server's base URL, "
                "e.g. http://localhost:9090"
            )
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, params: dict[str, str]) -> Any:
        full = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(full, timeout=self.timeout_s) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code in (400, 422):
                detail = json.loads(exc.read() or b"{}").get("error", "")
                raise QueryRejected(f"Prometheus rejected {params.get('query')!r}: {detail}") from None
            raise PrometheusUnreachable(f"Prometheus at {self.url} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusUnreachable(
                f"cannot reach Prometheus at {self.url} ({reason}); port-forward it, e.g. "
                "`kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus 9090`, "
                "or pass --prometheus URL"
            ) from None
        if body.get("status") != "success":
            raise QueryRejected(f"Prometheus rejected {params.get('query')!r}: {body.get('error')}")
        return body["data"]

    def range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        data = self._get(
            "/api/v1/query_range",
            {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
        )
        return [(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]

    def instant(self, query: str, time: float) -> list[tuple[dict[str, str], float]]:
        data = self._get("/api/v1/query", {"query": query, "time": f"{time:.3f}"})
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]
