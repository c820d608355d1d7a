"""`invoke usage`: who used which GPUs, how well, and what it cost, read from Prometheus.

Per team (a Kueue ClusterQueue) and per pool (a Kueue flavor), over a window ending at `until`:
- allocated GPU-hours: GPUs Kueue counts against the team (`kueue_cluster_queue_resource_usage`), MIG slices
  and time-sliced replicas converted to whole GPUs (1/instances, 1/replicas);
- used GPU-hours: utilisation-weighted (`DCGM_FI_DEV_GPU_UTIL` / 100 of the GPUs a team's pods hold);
- idle allocated GPU-hours: GPUs held by a pod below 5% utilisation;
- cost: allocated GPU-hours x the pool's price per GPU-hour (catalog or price file);
- quota utilisation: allocated / nominal-quota GPU-hours;
- queue wait p50/p95 from Kueue's admission wait histogram (per team only: Kueue does not label it by flavor).
Series are read with range queries at a fixed step and integrated here (sum x step), so an hour is an hour
whatever the Prometheus version's range-boundary rules. A metric the report needs but cannot find becomes a
note naming it and what produces it, and its columns show no number.
"""

from __future__ import annotations

import math
import re
import time as clock
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infra.errors import ConfigError
from infra.monitoring import metrics as m
from infra.monitoring.prometheus import Prometheus, Series
from infra.scheduling import pool_view
from infra.spec import ClusterSpec

MAX_POINTS = 10_000  # per series; Prometheus refuses range queries over 11,000 points
UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
POOL = m.POOL_LABEL_METRIC
ON_POOL = f'* on (node) group_left ({POOL}) ({m.NODE_LABELS}{{{POOL}!=""}} * 0 + 1)'
GPU = 'resource=~"nvidia.com/.*"'

QUERIES = {
    "allocated": f"sum by (cluster_queue, flavor, resource) ({m.KUEUE_USAGE}{{{GPU}}})",
    "quota": f"sum by (cluster_queue, flavor, resource) ({m.KUEUE_NOMINAL}{{{GPU}}})",
    "used_team": f'sum by (namespace) ({m.GPU_UTIL}{{pod!=""}}) / 100',
    "idle_team": f'count by (namespace) ({m.GPU_UTIL}{{pod!=""}} < {m.IDLE_UTIL_PERCENT})',
    "used_pool": f'sum by ({POOL}) ({m.GPU_UTIL}{{pod!=""}} {ON_POOL}) / 100',
    "idle_pool": f'count by ({POOL}) (({m.GPU_UTIL}{{pod!=""}} < {m.IDLE_UTIL_PERCENT}) {ON_POOL})',
}
MISSING = {
    "allocated": f"{m.KUEUE_USAGE} not found: Kueue's metrics are not scraped, or its configuration lacks "
    "metrics.enableClusterQueueResources; allocated GPU-hours, cost and quota utilisation are unknown",
    "quota": f"{m.KUEUE_NOMINAL} not found (Kueue metrics, as above): quota utilisation is unknown",
    "used_team": f"{m.GPU_UTIL} with pod labels not found: dcgm-exporter is not scraped or runs without its "
    "Kubernetes pod mapping; used and idle GPU-hours are unknown",
    "used_pool": f"{m.NODE_LABELS} has no {POOL} label: kube-state-metrics needs "
    "--metric-labels-allowlist=nodes=[gpufleet.io/pool] (set by `prometheus: install`); per-pool used and "
    "idle GPU-hours are unknown",
    "wait": f"{m.KUEUE_ADMISSION_WAIT} has no admissions in the window: queue waits are unknown",
}


@dataclass
class Row:
    name: str
    allocated_h: float | None = None
    used_h: float | None = None
    idle_h: float | None = None
    cost_usd: float | None = None
    quota_h: float | None = None
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None

    @property
    def quota_utilisation(self) -> float | None:
        if self.allocated_h is None or not self.quota_h:
            return None
        return self.allocated_h / self.quota_h

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "allocated_gpu_hours": self.allocated_h,
            "used_gpu_hours": self.used_h,
            "idle_gpu_hours": self.idle_h,
            "cost_usd": self.cost_usd,
            "quota_gpu_hours": self.quota_h,
            "quota_utilisation": self.quota_utilisation,
            "queue_wait_p50_seconds": self.wait_p50_s,
            "queue_wait_p95_seconds": self.wait_p95_s,
        }


@dataclass
class UsageReport:
    stack: str
    prometheus: str
    since: str
    start: float  # first sample time (epoch seconds)
    end: float
    step: float
    teams: list[Row]
    pools: list[Row]
    notes: list[str] = field(default_factory=list)
    # hourly-resolution time series for the plots: name -> (times, allocated GPUs) per team
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "prometheus": self.prometheus,
            "since": self.since,
            "start": datetime.fromtimestamp(self.start - self.step, UTC).isoformat(),
            "end": datetime.fromtimestamp(self.end, UTC).isoformat(),
            "teams": [r.as_dict() for r in self.teams],
            "pools": [r.as_dict() for r in self.pools],
            "notes": self.notes,
        }


def parse_window(text: str) -> int:
    match = re.fullmatch(r"([1-9]\d*)([mhdw])", text.strip())
    if not match:
        raise ConfigError(f"--since: expected a duration such as 90m, 24h, 7d or 2w, got {text!r}")
    return int(match.group(1)) * UNITS[match.group(2)]


def parse_until(text: str) -> float:
    if not text:
        return clock.time()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ConfigError(f"--until: expected an ISO 8601 time or a Unix timestamp, got {text!r}") from None


def step_for(window_s: int) -> int:
    """One-minute resolution, coarser for windows longer than MAX_POINTS minutes (whole minutes)."""
    return 60 * max(1, math.ceil(window_s / 60 / MAX_POINTS))


def gpu_factors(spec: ClusterSpec) -> dict[tuple[str, str], float]:
    """(pool, resource) -> whole GPUs per unit: MIG slices and time-sliced replicas are fractions of a GPU."""
    out: dict[tuple[str, str], float] = {}
    for pool in spec.node_pools:
        view = pool_view(spec, pool)
        out[(pool.name, "nvidia.com/gpu")] = 1.0
        if view.time_slicing_replicas:
            out[(pool.name, "nvidia.com/gpu.shared")] = 1 / view.time_slicing_replicas
        if view.mig_profile and view.mig_instances_per_gpu:
            out[(pool.name, f"nvidia.com/mig-{view.mig_profile}")] = 1 / view.mig_instances_per_gpu
    return out


def _hours(series: Series, step: float) -> float:
    return sum(v for _, v in series[1] if not math.isnan(v)) * step / 3600


def _waits(prom: Prometheus, window_s: int, end: float) -> dict[str, tuple[float | None, float | None]]:
    """Team -> (p50, p95) seconds: Prometheus' histogram_quantile over the window's admission wait buckets."""
    out: dict[str, list[float | None]] = {}
    for i, q in enumerate((0.5, 0.95)):
        expr = (
            f"histogram_quantile({q}, sum by (cluster_queue, le) "
            f"(increase({m.KUEUE_ADMISSION_WAIT}_bucket[{window_s}s])))"
        )
        for labels, value in prom.instant(expr, end):
            if not math.isnan(value):
                out.setdefault(labels.get("cluster_queue", ""), [None, None])[i] = value
    return {team: (p50, p95) for team, (p50, p95) in out.items()}


def _add(total: float | None, value: float) -> float:
    return (total or 0.0) + value


def build_report(
    spec: ClusterSpec,
    prom: Prometheus,
    since: str = "7d",
    until: str = "",
    prices: dict[str, float | None] | None = None,
) -> UsageReport:
    window = parse_window(since)
    step = step_for(window)
    end = math.floor(parse_until(until) / step) * step
    start = end - window + step
    fetched = {key: prom.range(q, start, end, step) for key, q in QUERIES.items()}
    factors = gpu_factors(spec)
    prices = prices or {}
    teams = {t.name: Row(t.name) for t in spec.teams}
    pools = {p.name: Row(p.name) for p in spec.node_pools}
    team_of_namespace = {t.namespace: t.name for t in spec.teams}
    notes: list[str] = []
    report = UsageReport(
        spec.stack, prom.url, since, start, end, step, list(teams.values()), list(pools.values())
    )

    for key in ("allocated", "quota"):
        if not fetched[key]:
            notes.append(MISSING[key])
            continue
        for labels, values in fetched[key]:
            team, pool = labels.get("cluster_queue", ""), labels.get("flavor", "")
            factor = factors.get((pool, labels.get("resource", "")))
            if team not in teams or pool not in pools or factor is None:
                continue
            hours = _hours((labels, values), step) * factor
            for row in (teams[team], pools[pool]):
                if key == "allocated":
                    row.allocated_h = _add(row.allocated_h, hours)
                else:
                    row.quota_h = _add(row.quota_h, hours)
            if key == "allocated":
                price = prices.get(pool)
                if price is not None:
                    teams[team].cost_usd = _add(teams[team].cost_usd, hours * price)
                    pools[pool].cost_usd = _add(pools[pool].cost_usd, hours * price)
                line = report.timeline.setdefault(team, [])
                by_time = dict(line)
                for t, v in values:
                    by_time[t] = by_time.get(t, 0.0) + v * factor
                report.timeline[team] = sorted(by_time.items())
    unpriced = sorted(p for p, price in prices.items() if price is None) if prices else []
    if unpriced:
        notes.append(f"no price for pool(s) {', '.join(unpriced)}: give --price-file to cost them")

    if not fetched["used_team"]:
        notes.append(MISSING["used_team"])
    else:
        others: set[str] = set()
        for kind in ("used_team", "idle_team"):
            for labels, values in fetched[kind]:
                owner = team_of_namespace.get(labels.get("namespace", ""))
                if owner is None:
                    others.add(labels.get("namespace", ""))
                    continue
                hours = _hours((labels, values), step)
                if kind == "used_team":
                    teams[owner].used_h = _add(teams[owner].used_h, hours)
                else:
                    teams[owner].idle_h = _add(teams[owner].idle_h, hours)
        for row in teams.values():
            row.used_h = row.used_h or 0.0
            row.idle_h = row.idle_h or 0.0
        if others:
            notes.append(
                f"GPUs held by pods outside team namespaces ({', '.join(sorted(others))}) are not in the team rows"
            )
        if not fetched["used_pool"]:
            notes.append(MISSING["used_pool"])
        else:
            for kind in ("used_pool", "idle_pool"):
                for labels, values in fetched[kind]:
                    pool_row = pools.get(labels.get(POOL, ""))
                    if pool_row is None:
                        continue
                    hours = _hours((labels, values), step)
                    if kind == "used_pool":
                        pool_row.used_h = _add(pool_row.used_h, hours)
                    else:
                        pool_row.idle_h = _add(pool_row.idle_h, hours)
            for row in pools.values():
                row.used_h = row.used_h or 0.0
                row.idle_h = row.idle_h or 0.0

    waits = _waits(prom, window, end)
    if not any(p50 is not None for p50, _ in waits.values()):
        notes.append(MISSING["wait"])
    for team, (p50, p95) in waits.items():
        if team in teams:
            teams[team].wait_p50_s, teams[team].wait_p95_s = p50, p95
    report.notes = notes
    return report
