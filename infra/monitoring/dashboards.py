"""Grafana dashboards as JSON, provisioned by the Grafana chart's sidecar from labelled ConfigMaps.

Three dashboards: the fleet (GPU utilisation and health), teams (allocated vs quota vs used, idle GPUs, queue
waits) and pools (nodes, GPUs, cost per hour). Panels use only metrics listed in `infra.monitoring.metrics`
and no Grafana template variables, so every expression is plain PromQL that promtool can check.
"""

from __future__ import annotations

import json
from typing import Any

from infra.monitoring import metrics as m
from infra.monitoring.prices import gpu_hour_prices
from infra.spec import ClusterSpec

SCHEMA_VERSION = 39
GPU = 'resource=~"nvidia.com/.*"'
POOL = m.POOL_LABEL_METRIC
# DCGM GPU series joined to their node's pool (the dcgm-exporter ServiceMonitor adds `node`).
NODE_POOL = f'group_left ({POOL}) ({m.NODE_LABELS}{{{POOL}!=""}} * 0 + 1)'


def _panel(
    pid: int, title: str, targets: list[tuple[str, str]], unit: str = "short", y: int = 0
) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * ((pid - 1) % 2), "y": 8 * ((pid - 1) // 2) + y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _dashboard(uid: str, title: str, panels: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["gpufleet"],
        "timezone": "utc",
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "panels": panels,
    }


def fleet() -> dict[str, Any]:
    u = m.GPU_UTIL
    return _dashboard(
        "gpufleet-fleet",
        "gpufleet / Fleet",
        [
            _panel(1, "GPU utilisation (mean, %)", [(f"avg({u})", "all GPUs")], "percent"),
            _panel(
                2,
                "GPUs allocated vs idle",
                [
                    (f'count({u}{{pod!=""}})', "allocated"),
                    (f'count({u}{{pod!=""}} < {m.IDLE_UTIL_PERCENT})', "allocated, idle"),
                    (f"count({u})", "total"),
                ],
            ),
            _panel(
                3,
                "GPU temperature (max, C)",
                [(f"max by (Hostname) ({m.GPU_TEMP})", "{{Hostname}}")],
                "celsius",
            ),
            _panel(4, "Power draw (W)", [(f"sum by (Hostname) ({m.POWER_USAGE})", "{{Hostname}}")], "watt"),
            _panel(
                5,
                "GPUs with an XID, ECC or row-remap fault",
                [
                    (f"count({m.XID} != 0) or vector(0)", "last XID non-zero"),
                    (f"count(increase({m.ECC_DBE_VOLATILE}[1h]) > 0) or vector(0)", "double-bit ECC (1h)"),
                    (f"count({m.ROW_REMAP_FAILURE} > 0) or vector(0)", "row-remap failure"),
                ],
            ),
            _panel(
                6,
                "Throttled time (fraction)",
                [
                    (f"max by (Hostname) (rate({m.THERMAL_VIOLATION}[5m]) / 1e9)", "thermal {{Hostname}}"),
                    (f"max by (Hostname) (rate({m.POWER_VIOLATION}[5m]) / 1e9)", "power {{Hostname}}"),
                ],
                "percentunit",
            ),
            _panel(
                7,
                "GPU nodes not ready or cordoned",
                [
                    (
                        f'count(({m.NODE_CONDITION}{{condition="Ready",status="true"}} == 0)'
                        f' * on (node) ({m.NODE_LABELS}{{{POOL}!=""}} * 0 + 1)) or vector(0)',
                        "not ready",
                    ),
                    (
                        f"count(({m.NODE_UNSCHEDULABLE} == 1)"
                        f' * on (node) ({m.NODE_LABELS}{{{POOL}!=""}} * 0 + 1)) or vector(0)',
                        "cordoned",
                    ),
                ],
            ),
        ],
    )


def teams() -> dict[str, Any]:
    by = "cluster_queue"
    return _dashboard(
        "gpufleet-teams",
        "gpufleet / Teams",
        [
            _panel(
                1,
                "GPUs allocated (Kueue) vs quota",
                [
                    (f"sum by ({by}) ({m.KUEUE_USAGE}{{{GPU}}})", "{{cluster_queue}} allocated"),
                    (f"sum by ({by}) ({m.KUEUE_NOMINAL}{{{GPU}}})", "{{cluster_queue}} quota"),
                ],
            ),
            _panel(
                2,
                "GPUs used (utilisation-weighted)",
                [(f'sum by (namespace) ({m.GPU_UTIL}{{pod!=""}}) / 100', "{{namespace}}")],
            ),
            _panel(
                3,
                "Idle allocated GPUs",
                [
                    (
                        f'count by (namespace) ({m.GPU_UTIL}{{pod!=""}} < {m.IDLE_UTIL_PERCENT})',
                        "{{namespace}}",
                    )
                ],
            ),
            _panel(
                4,
                "Idle GPU-hours (last 24h)",
                [
                    (
                        f'sum_over_time((count by (namespace) ({m.GPU_UTIL}{{pod!=""}} < {m.IDLE_UTIL_PERCENT}))[24h:1m]) / 60',
                        "{{namespace}}",
                    )
                ],
            ),
            _panel(
                5,
                "Queue wait p50 / p95 (1h)",
                [
                    (
                        f"histogram_quantile(0.5, sum by ({by}, le) (rate({m.KUEUE_ADMISSION_WAIT}_bucket[1h])))",
                        "{{cluster_queue}} p50",
                    ),
                    (
                        f"histogram_quantile(0.95, sum by ({by}, le) (rate({m.KUEUE_ADMISSION_WAIT}_bucket[1h])))",
                        "{{cluster_queue}} p95",
                    ),
                ],
                "s",
            ),
            _panel(6, "Pending workloads", [(f"sum by ({by}) ({m.KUEUE_PENDING})", "{{cluster_queue}}")]),
            _panel(
                7,
                "GPUs requested by pods (kube-state-metrics)",
                [
                    (
                        f'sum by (namespace) ({m.POD_REQUESTS}{{resource="{m.GPU_RESOURCE_METRIC}"}})',
                        "{{namespace}}",
                    )
                ],
            ),
        ],
    )


def pools(spec: ClusterSpec) -> dict[str, Any]:
    cost = [
        (f'sum({m.KUEUE_USAGE}{{flavor="{name}",{GPU}}}) * {price:g}', name)
        for name, price in gpu_hour_prices(spec).items()
        if price is not None
    ]
    panels = [
        _panel(
            1, "Nodes per pool", [(f'count by ({POOL}) ({m.NODE_LABELS}{{{POOL}!=""}})', f"{{{{{POOL}}}}}")]
        ),
        _panel(
            2,
            "GPUs per pool: allocatable vs allocated",
            [
                (
                    f'sum by ({POOL}) ({m.NODE_ALLOCATABLE}{{resource="{m.GPU_RESOURCE_METRIC}"}}'
                    f" * on (node) {NODE_POOL})",
                    f"{{{{{POOL}}}}} allocatable",
                ),
                (f"sum by (flavor) ({m.KUEUE_USAGE}{{{GPU}}})", "{{flavor}} allocated"),
            ],
        ),
        _panel(
            3,
            "GPU utilisation per pool (mean, %)",
            [(f"avg by ({POOL}) ({m.GPU_UTIL} * on (node) {NODE_POOL})", f"{{{{{POOL}}}}}")],
            "percent",
        ),
    ]
    if cost:
        panels.append(_panel(4, "Allocated GPU cost (USD per hour)", cost, "currencyUSD"))
    return _dashboard("gpufleet-pools", "gpufleet / Pools", panels)


def dashboards(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    """File name -> dashboard JSON model."""
    return {
        "gpufleet-fleet.json": fleet(),
        "gpufleet-teams.json": teams(),
        "gpufleet-pools.json": pools(spec),
    }


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def to_json(dashboard: dict[str, Any]) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=False) + "\n"
