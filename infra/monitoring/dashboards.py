"""Grafana dashboards as JSON, provisioned by the Grafana chart's sidecar from labelled ConfigMaps.

Three dashboards: the fleet (GPU utilisation and health), teams (allocated vs quota vs used, idle GPUs, queue
waits) and pools (nodes, GPUs, cost per hour). Panels use only metrics listed in `infra.monitoring.metrics`
and no Grafana template variables, so every expression is plain PromQL that promtool can check. Kueue gauges are
read from the leader replica; allocated GPUs and their cost come from gpufleet's whole-GPU recording rules
(`metrics.RECORD_ALLOCATED`); GPUs are counted per physical GPU (`UUID`), since with dcgm-exporter's virtual-GPU
mapping a shared GPU has one series per pod besides its own.
"""

from __future__ import annotations

import json
from typing import Any

from infra.monitoring import metrics as m
from infra.monitoring.alerts import FALLEN_OFF_BUS_XID, HARDWARE_XIDS
from infra.monitoring.prices import gpu_hour_prices
from infra.spec import ClusterSpec

SCHEMA_VERSION = 39
HARDWARE = "|".join(str(x) for x in (*HARDWARE_XIDS, FALLEN_OFF_BUS_XID))
POOL = m.POOL_LABEL_METRIC


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
    # One series per physical GPU: the GPU's own, or the highest of its pods' (per-process shares add up to it).
    per_gpu = f"max by (Hostname, UUID) ({u})"
    allocated = f'count(count by (Hostname, UUID) ({u}{{pod!=""}}))'
    idle = f'count(max by (Hostname, UUID) ({u}{{pod!=""}}) < {m.IDLE_UTIL_PERCENT})'
    return _dashboard(
        "gpufleet-fleet",
        "gpufleet / Fleet",
        [
            _panel(1, "GPU utilisation (mean, %)", [(f"avg({per_gpu})", "all GPUs")], "percent"),
            _panel(
                2,
                "GPUs allocated vs idle",
                [
                    (f"{allocated} or vector(0)", "allocated"),
                    (f"{idle} or vector(0)", "allocated, idle"),
                    (f"count(count by (Hostname, UUID) ({u}))", "total"),
                ],
            ),
            _panel(
                3,
                "GPU temperature (max, C)",
                [(f"max by (Hostname) ({m.GPU_TEMP})", "{{Hostname}}")],
                "celsius",
            ),
            _panel(
                4,
                "Power draw (W)",
                [(f"sum by (Hostname) (max by (Hostname, UUID) ({m.POWER_USAGE}))", "{{Hostname}}")],
                "watt",
            ),
            _panel(
                5,
                "GPUs with a hardware XID, ECC or row-remap fault",
                [
                    (
                        f'count(count by (Hostname, UUID) ({m.XID_COUNT}{{xid=~"{HARDWARE}"}} > 0)) or vector(0)',
                        "hardware XID (window)",
                    ),
                    (
                        f"count(count by (Hostname, UUID) ({m.ECC_DBE_VOLATILE} > 0)) or vector(0)",
                        "double-bit ECC",
                    ),
                    (
                        f"count(count by (Hostname, UUID) ({m.ROW_REMAP_PENDING} > 0)) or vector(0)",
                        "row remap pending",
                    ),
                    (
                        f"count(count by (Hostname, UUID) ({m.ROW_REMAP_FAILURE} > 0)) or vector(0)",
                        "row-remap failure",
                    ),
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
                        f'count((max by (node) ({m.NODE_CONDITION}{{condition="Ready",status="true"}}) == 0)'
                        f" {m.on_pool()}) or vector(0)",
                        "not ready",
                    ),
                    (
                        f"count((max by (node) ({m.NODE_UNSCHEDULABLE}) == 1) {m.on_pool()}) or vector(0)",
                        "cordoned",
                    ),
                ],
            ),
            _panel(
                8,
                "XIDs in the exporter's window, by XID (application XIDs too)",
                [(f"sum by (xid) ({m.XID_COUNT})", "XID {{xid}}")],
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
                    (f"sum by ({by}) ({m.RECORD_ALLOCATED})", "{{cluster_queue}} allocated"),
                    (f"sum by ({by}) ({m.RECORD_QUOTA})", "{{cluster_queue}} quota"),
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
            _panel(
                6,
                "Pending workloads",
                [(f"sum by ({by}) ({m.KUEUE_PENDING}{{{m.KUEUE_LEADER}}})", "{{cluster_queue}}")],
            ),
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
        (f'sum({m.RECORD_ALLOCATED}{{flavor="{name}"}}) * {price:g}', name)
        for name, price in gpu_hour_prices(spec).items()
        if price is not None
    ]
    panels = [
        _panel(1, "Nodes per pool", [(f"count by ({POOL}) ({m.node_pool()})", f"{{{{{POOL}}}}}")]),
        _panel(
            2,
            "GPUs per pool: allocatable vs allocated",
            [
                (
                    f"sum by ({POOL}) ({m.node_gpus(m.NODE_ALLOCATABLE)} {m.on_pool()})",
                    f"{{{{{POOL}}}}} allocatable",
                ),
                (f"sum by (flavor) ({m.RECORD_ALLOCATED})", "{{flavor}} allocated (whole GPUs)"),
            ],
        ),
        _panel(
            3,
            "GPU utilisation per pool (mean, %)",
            [(f"avg by ({POOL}) (max by (node, UUID) ({m.GPU_UTIL}) {m.on_pool()})", f"{{{{{POOL}}}}}")],
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
