"""`invoke usage`: who used which GPUs, how well, and what it cost, read from Prometheus.

Per team (a Kueue ClusterQueue) and per pool (a Kueue flavor), over a window ending at `until`:
- allocated GPU-hours: GPUs Kueue counts against the team (`kueue_cluster_queue_resource_usage` of Kueue's
  leader replica: both replicas export it), MIG slices and time-sliced replicas converted to whole GPUs
  (1/instances, 1/replicas);
- used GPU-hours: utilisation-weighted, per pool (`UsageMetric`): `DCGM_FI_DEV_GPU_UTIL` / 100 of the pods'
  series; on time-sliced pools what a pod's value is depends on the exporter the platform runs
  (`infra.monitoring.exporter`): its own processes' share of the physical GPU (per-process), or the whole GPU's
  value on one pod per GPU (one-pod), so neither is weighted again, and a note says when the split between
  teams follows one pod per GPU; on MIG pools `DCGM_FI_PROF_GR_ENGINE_ACTIVE` of the pod's instance x
  1/instances (dcgm-exporter reports no GPU_UTIL for MIG); a pool without any such series is unknown;
- idle allocated GPU-hours: pods below 5% utilisation, each counting as the fraction of a GPU it holds;
- cost: allocated GPU-hours x the pool's price per GPU-hour (catalog or price file);
- quota utilisation: allocated / nominal-quota GPU-hours;
- queue wait p50/p95 from Kueue's admission wait histogram (per team only: Kueue does not label it by flavor).
  Kueue observes a wait at admission, so workloads still pending are not in it; a note counts them (from
  gpufleet's kube-state-metrics Workload metrics).
Series are read with range queries at a fixed step and integrated here (sum x step), so an hour is an hour
whatever the Prometheus version's range-boundary rules. A metric the report needs but cannot find becomes a
note naming it and what produces it, and its columns show no number; so does a window that starts before
Prometheus' first sample (retention, or a restart of a Prometheus without a persistent volume).
"""

from __future__ import annotations

import math
import re
import time as clock
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infra.errors import ConfigError
from infra.monitoring import exporter
from infra.monitoring import metrics as m
from infra.monitoring.prometheus import Prometheus, Series
from infra.scheduling import pool_view
from infra.spec import ClusterSpec

MAX_POINTS = 10_000  # per series; Prometheus refuses range queries over 11,000 points
UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
POOL = m.POOL_LABEL_METRIC
GPU = f'resource=~"nvidia.com/.*",{m.KUEUE_LEADER}'

QUERIES = {
    "allocated": f"sum by (cluster_queue, flavor, resource) ({m.KUEUE_USAGE}{{{GPU}}})",
    "quota": f"sum by (cluster_queue, flavor, resource) ({m.KUEUE_NOMINAL}{{{GPU}}})",
    # Without pool labels on nodes: whole-GPU utilisation per namespace, every series counted as a GPU.
    "used_team": f'sum by (namespace) ({m.GPU_UTIL}{{pod!=""}}) / 100',
    "idle_team": f'count by (namespace) ({m.GPU_UTIL}{{pod!=""}} < {m.IDLE_UTIL_PERCENT})',
    "pools": f"count by ({POOL}) ({m.node_pool()})",
    # Every scrape writes `up`: its first sample is where Prometheus' data begins.
    "scraped": f"count({m.UP})",
}
PENDING_AT_END = (
    f"time() - max by (namespace, workload) ({m.WORKLOAD_CREATED})"
    f" unless on (namespace, workload)"
    f' (max by (namespace, workload) ({m.WORKLOAD_CONDITION}{{type="QuotaReserved"}}) == 1)'
)
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
    "pending": f"{m.WORKLOAD_CREATED} not found (kube-state-metrics' Workload metrics, set by `prometheus: "
    "install`): workloads still pending at the window's end are not counted, and the queue waits cover "
    "admitted workloads only",
}


@dataclass(frozen=True)
class UsageMetric:
    """How a pool's used and idle GPU-hours are read: the DCGM field, its scale to a 0-1 ratio, the idle
    threshold on that field, and the fraction of a physical GPU one pod series stands for."""

    field: str
    scale: float  # field value -> fraction of the GPU (or MIG instance) busy
    idle_below: float
    used_weight: float  # whole GPUs per unit of `scale`d value
    idle_weight: float  # whole GPUs one idle pod series holds

    def used(self, pool: str) -> str:
        return f'sum by (namespace) ({self.field}{{pod!=""}} {m.on_pool(pool)})'

    def idle(self, pool: str) -> str:
        return f'count by (namespace) (({self.field}{{pod!=""}} < {self.idle_below:g}) {m.on_pool(pool)})'

    def present(self, pool: str) -> str:
        return f"count({self.field} {m.on_pool(pool)})"


def usage_metric(spec: ClusterSpec, pool_name: str) -> UsageMetric:
    """MIG: GR_ENGINE_ACTIVE (0-1, per instance) x 1/instances. Time-sliced: GPU_UTIL per pod, weighted as the
    exporter's mapping needs (`exporter.used_share`: not again where the value is the pod's own share or one pod
    carries the GPU's whole value), an idle pod holding 1/replicas of a GPU. Whole GPUs: GPU_UTIL / 100."""
    pool = next(p for p in spec.node_pools if p.name == pool_name)
    view = pool_view(spec, pool)
    if view.mig_profile and view.mig_instances_per_gpu:
        share = 1 / view.mig_instances_per_gpu
        return UsageMetric(m.GR_ENGINE_ACTIVE, 1.0, m.IDLE_ENGINE_RATIO, share, share)
    replicas = view.time_slicing_replicas or 1
    used = exporter.used_share(exporter.deployed_mapping(spec), replicas) if replicas > 1 else 1.0
    return UsageMetric(m.GPU_UTIL, 0.01, m.IDLE_UTIL_PERCENT, used, 1 / replicas)


def exporter_note(spec: ClusterSpec, pools: list[str]) -> str | None:
    """What the team split of time-sliced pools means with the exporter the platform runs, where it is not each
    pod's own share."""
    shared = [p.name for p in spec.node_pools if p.name in pools and p.sharing.time_slicing]
    if not shared:
        return None
    mapping, names = exporter.deployed_mapping(spec), ", ".join(shared)
    if mapping is exporter.Mapping.PER_PROCESS:
        return None
    if mapping is None:
        return (
            f"time-sliced pool(s) {names}: the cluster's own GPU operator configures dcgm-exporter, so what a "
            "sharing pod's utilisation means (its own share, or the whole GPU's on one of its pods) is not known "
            "here; read their used and idle GPU-hours per team with care"
        )
    found = exporter.deployment(spec)
    release = found.release if found else "?"
    return (
        f"time-sliced pool(s) {names}: dcgm-exporter {release} here carries each shared GPU's utilisation on "
        f"one of its pods ({mapping}), so the pool's used GPU-hours are right but their split between teams "
        "follows that pod, and idle GPU-hours count only its replica (a lower bound)"
    )


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


def step_for(window_s: int, scrape_s: int = 60) -> int:
    """One scrape interval: every sample counts once, so a workload's hours are right to within a scrape at each
    end; coarser (whole seconds) for windows longer than MAX_POINTS scrapes."""
    return max(scrape_s, math.ceil(window_s / MAX_POINTS))


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
    step = step_for(window, m.seconds(spec.cluster.monitoring.scrape_interval))
    end = math.floor(parse_until(until) / step) * step
    start = end - window + step
    fetched = {key: prom.range(q, start, end, step) for key, q in QUERIES.items()}
    factors = gpu_factors(spec)
    prices = prices or {}
    teams = {t.name: Row(t.name) for t in spec.teams}
    pools = {p.name: Row(p.name) for p in spec.node_pools}
    team_of_namespace = {(t.namespace or t.name): t.name for t in spec.teams}
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

    pooled = {labels.get(POOL, "") for labels, _ in fetched["pools"]} & set(pools)
    if pooled:
        _pool_usage(spec, prom, (start, end, step), teams, pools, sorted(pooled), notes)
    else:
        _team_usage_without_pools(fetched, step, teams, notes, team_of_namespace)

    waits = _waits(prom, window, end)
    if not any(p50 is not None for p50, _ in waits.values()):
        notes.append(MISSING["wait"])
    for team, (p50, p95) in waits.items():
        if team in teams:
            teams[team].wait_p50_s, teams[team].wait_p95_s = p50, p95
    notes += pending_notes(spec, prom, end)
    if (note := window_note(fetched["scraped"], start)) is not None:
        notes.append(note)
    report.notes = notes
    return report


def window_note(scraped: list[Series], start: float) -> str | None:
    """A note when Prometheus' first sample in the window comes later than the window's start: its retention
    (`monitoring.retention`, `retentionSize`) or a restart without a persistent volume cut the history."""
    first = min((values[0][0] for _, values in scraped if values), default=None)
    if first is None or first <= start:
        return None
    begins = datetime.fromtimestamp(first, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"Prometheus has samples only from {begins}, after the window's start: the hours before are missing "
        "from every column (its retention, monitoring.retention/retentionSize, or a restart without a "
        "persistent volume)"
    )


def pending_notes(spec: ClusterSpec, prom: Prometheus, end: float) -> list[str]:
    """Kueue observes the admission wait at admission, so workloads still waiting are not in p50/p95: count them
    per team from gpufleet's Workload metrics (creation time, QuotaReserved condition) at the window's end."""
    if not prom.instant(f"count({m.WORKLOAD_CREATED})", end):
        return [MISSING["pending"]]
    team_of = {(t.namespace or t.name): t.name for t in spec.teams}
    waiting: dict[str, list[float]] = {}
    for labels, age in prom.instant(PENDING_AT_END, end):
        team = team_of.get(labels.get("namespace", ""))
        if team is not None:
            waiting.setdefault(team, []).append(age)
    if not waiting:
        return []
    parts = [
        f"{team} {len(ages)} (oldest waited {_duration(max(ages))})" for team, ages in sorted(waiting.items())
    ]
    return [
        "queue waits cover admitted workloads only; still pending at the window's end: " + ", ".join(parts)
    ]


def _duration(seconds: float) -> str:
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _team_usage_without_pools(
    fetched: dict[str, list[Series]],
    step: float,
    teams: dict[str, Row],
    notes: list[str],
    team_of: dict[str, str],
) -> None:
    """No pool label on nodes: team used/idle from whole-GPU utilisation; pool columns stay unknown."""
    if not fetched["used_team"]:
        notes.append(MISSING["used_team"])
        return
    notes.append(MISSING["used_pool"])
    _add_team_hours(fetched["used_team"], fetched["idle_team"], step, 1.0, 1.0, teams, notes, team_of)
    for row in teams.values():
        row.used_h = row.used_h or 0.0
        row.idle_h = row.idle_h or 0.0


def _add_team_hours(
    used: list[Series],
    idle: list[Series],
    step: float,
    used_weight: float,
    idle_weight: float,
    teams: dict[str, Row],
    notes: list[str],
    team_of: dict[str, str] | None = None,
) -> tuple[float, float]:
    """Add namespace series to their team rows; returns the totals (all namespaces) for the pool row."""
    totals = [0.0, 0.0]
    others: set[str] = set()
    for i, (series, weight) in enumerate(((used, used_weight), (idle, idle_weight))):
        for labels, values in series:
            hours = _hours((labels, values), step) * weight
            totals[i] += hours
            namespace = labels.get("namespace", "")
            owner = (team_of or {}).get(namespace)
            if owner is None:
                others.add(namespace)
            elif i == 0:
                teams[owner].used_h = _add(teams[owner].used_h, hours)
            else:
                teams[owner].idle_h = _add(teams[owner].idle_h, hours)
    if others:
        note = f"GPUs held by pods outside team namespaces ({', '.join(sorted(others))}) are not in the team rows"
        if note not in notes:
            notes.append(note)
    return totals[0], totals[1]


def _pool_usage(
    spec: ClusterSpec,
    prom: Prometheus,
    window: tuple[float, float, float],
    teams: dict[str, Row],
    pools: dict[str, Row],
    pooled: list[str],
    notes: list[str],
) -> None:
    """Per pool, with its own `UsageMetric`: used and idle hours by namespace, added to teams and the pool."""
    start, end, step = window
    team_of = {(t.namespace or t.name): t.name for t in spec.teams}
    unknown: list[str] = []
    for name in pooled:
        how = usage_metric(spec, name)
        if not prom.range(how.present(name), start, end, step):
            unknown.append(f"{name} ({how.field})")
            continue
        used = prom.range(how.used(name), start, end, step)
        idle = prom.range(how.idle(name), start, end, step)
        used_h, idle_h = _add_team_hours(
            used, idle, step, how.scale * how.used_weight, how.idle_weight, teams, notes, team_of
        )
        pools[name].used_h, pools[name].idle_h = used_h, idle_h
    if len(unknown) == len(pooled):
        notes.append(MISSING["used_team"])
        return
    for row in teams.values():
        row.used_h = row.used_h or 0.0
        row.idle_h = row.idle_h or 0.0
    if unknown:
        notes.append(
            f"no DCGM series for pool(s) {', '.join(unknown)}: their used and idle GPU-hours are unknown"
        )
    if (note := exporter_note(spec, pooled)) is not None:
        notes.append(note)
