"""gpufleet's alert and recording rules, as Prometheus rule groups (the body of a PrometheusRule, or a promtool
rule file).

What each alert means and what to do is in docs/operations.md (the runbook annotation points there). Notes on
the choice of expressions:
- XID: `DCGM_FI_DEV_XID_ERRORS` is the *last* XID and never resets until the exporter restarts, so it is not
  alerted on (application XIDs would leave a warning on every busy GPU). dcgm-exporter's windowed
  `DCGM_EXP_XID_ERRORS_COUNT{xid}` counts each XID seen in its last window; only hardware XIDs alert
  (`HARDWARE_XIDS`), application ones are on the Fleet dashboard;
- a GPU that falls off the bus usually just stops reporting (DCGM cannot always deliver XID 79: NVIDIA/DCGM#162),
  so `GpuMissingFromDcgm` compares the GPUs dcgm-exporter reports per node with the node's GPU capacity
  (leaving out nodes whose GPU operator operands are off, which run no exporter by design), and
  `GpuDevicePluginUnhealthy` fires when the device plugin marks GPUs unhealthy (capacity - allocatable);
- double-bit ECC (volatile: cleared by a reset), pending and failed row remaps are levels, so the alerts stay
  while the GPU still needs a reset and fire for an error already there at the first scrape; NVLink errors are
  counters, any increase is a fault;
- throttling counters count nanoseconds throttled, so `rate(...) / 1e9` is the fraction of time throttled;
- every join with kube-state-metrics goes through `max by (node, ...)` (`metrics.node_pool`), so duplicate
  kube-state-metrics series never break `group_left`; every Kueue gauge is read from the leader;
- meta-alerts fire when a source every other alert depends on is down or absent;
- a pod's GPU counts as idle only where its zero can be believed: not on a GPU whose own device-level series is
  busy while every pod holding it reads exactly 0 (`metrics.degenerate_gpus`, dcgm-exporter unable to map the
  GPU's processes to pods);
- idle, pending and quota thresholds come from the spec, per team (a team's `idleAfter`/`pendingAfter`).
"""

from __future__ import annotations

from typing import Any

from infra.monitoring import extender
from infra.monitoring import metrics as m
from infra.monitoring.metrics import seconds
from infra.monitoring.runbook import alert as _alert
from infra.monitoring.usage import gpu_factors
from infra.spec import ClusterSpec, Team

GPU_LABELS = "Hostname, gpu, UUID"
# XIDs whose immediate action in NVIDIA's XID catalogue is a GPU reset, a node reboot or a hardware case rather
# than restarting the application (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
# "Resolution Bucket (Immediate Action)"): 48 double-bit ECC, 64 row-remap failure, 74 NVLink, 94/95 contained/
# uncontained ECC, 119/120 GSP timeout/error. 79 (fallen off the bus) has its own alert. Application XIDs (13,
# 31, 43, 45: the job's own fault or exit) are on the dashboard only.
HARDWARE_XIDS = (48, 64, 74, 94, 95, 119, 120)
FALLEN_OFF_BUS_XID = 79


def _xids(xids: tuple[int, ...]) -> str:
    return "|".join(str(x) for x in xids)


def gpu_health_rules(spec: ClusterSpec) -> list[dict[str, Any]]:
    nvlink = "|".join(m.NVLINK_ERRORS)
    on = "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}"
    capacity, allocatable = m.node_gpus(m.NODE_CAPACITY), m.node_gpus(m.NODE_ALLOCATABLE)
    reported = f"count by (node) (count by (node, UUID) ({m.GPU_TEMP}))"
    # A node whose operator operands are off (Bottlerocket) runs no exporter: nothing of it is missing.
    expected = f"({capacity} unless on (node) {m.exporterless_nodes()})"
    return [
        _alert(
            spec,
            "GpuFallenOffBus",
            f'{m.XID_COUNT}{{xid="{FALLEN_OFF_BUS_XID}"}} > 0',
            "critical",
            f"{on} has fallen off the bus (XID 79).",
        ),
        _alert(
            spec,
            "GpuHardwareXid",
            f'{m.XID_COUNT}{{xid=~"{_xids(HARDWARE_XIDS)}"}} > 0',
            "critical",
            f"{on} reported hardware XID {{{{ $labels.xid }}}}.",
        ),
        _alert(
            spec,
            "GpuMissingFromDcgm",
            f"({expected} > on (node) {reported}) or (({expected} > 0) unless on (node) {reported})",
            "critical",
            "Node {{ $labels.node }} has {{ $value }} GPUs but dcgm-exporter reports fewer: a GPU fell off "
            "the bus or the exporter lost it.",
            "10m",
        ),
        _alert(
            spec,
            "GpuDevicePluginUnhealthy",
            f"({capacity} - {allocatable}) > 0",
            "critical",
            "The device plugin marked {{ $value }} GPU(s) of node {{ $labels.node }} unhealthy.",
            "5m",
        ),
        _alert(
            spec,
            "GpuDoubleBitEccError",
            f"{m.ECC_DBE_VOLATILE} > 0",
            "critical",
            f"{on} has had {{{{ $value }}}} double-bit ECC errors since its last reset.",
        ),
        _alert(
            spec,
            "GpuRowRemapPending",
            f"{m.ROW_REMAP_PENDING} > 0",
            "warning",
            f"{on} has a row remap pending: it needs a GPU reset.",
        ),
        _alert(
            spec,
            "GpuRowRemapFailure",
            f"{m.ROW_REMAP_FAILURE} > 0",
            "critical",
            f"{on} failed to remap a memory row.",
        ),
        _alert(
            spec,
            "GpuNvlinkErrors",
            f'sum by ({GPU_LABELS}) (increase({{__name__=~"{nvlink}"}}[10m])) > 0',
            "warning",
            "NVLink errors on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}.",
        ),
        _alert(
            spec,
            "GpuThermalThrottling",
            f"rate({m.THERMAL_VIOLATION}[5m]) / 1e9 > 0.1",
            "warning",
            f"{on} is thermally throttled {{{{ $value | humanizePercentage }}}} of the time.",
            "10m",
        ),
        _alert(
            spec,
            "GpuPowerThrottling",
            f"rate({m.POWER_VIOLATION}[5m]) / 1e9 > 0.5",
            "info",
            f"{on} is power-capped {{{{ $value | humanizePercentage }}}} of the time.",
            "30m",
        ),
        _alert(
            spec,
            "GpuNodeNotReady",
            f'(max by (node) ({m.NODE_CONDITION}{{condition="Ready",status="true"}}) == 0) {m.on_pool()}',
            "critical",
            "Node {{ $labels.node }} of GPU pool {{ $labels." + m.POOL_LABEL_METRIC + " }} is not ready.",
            "5m",
        ),
    ]


def meta_rules(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The sources every other alert reads: a target down, a job with no target at all, Kueue's gauges gone.
    kube-prometheus-stack's own `TargetDown` covers only targets that exist. dcgm-exporter runs on GPU nodes
    only, and not on those whose operator operands are off (Bottlerocket), so its absence counts only while some
    other node has GPU capacity (AWS pools may scale to zero)."""
    jobs = "|".join(m.JOBS)
    capacity = m.node_gpus(m.NODE_CAPACITY)
    gpus_exist = f"on () (sum({capacity} unless on (node) {m.exporterless_nodes()}) > 0)"
    absent = {
        m.DCGM_JOB: f'absent_over_time({m.UP}{{job="{m.DCGM_JOB}"}}[10m]) and {gpus_exist}',
        m.KUEUE_JOB: f'absent_over_time({m.UP}{{job="{m.KUEUE_JOB}"}}[10m])',
        m.KSM_JOB: f'absent_over_time({m.UP}{{job="{m.KSM_JOB}"}}[10m])',
    }
    rules = [
        _alert(
            spec,
            "GpuMetricsTargetDown",
            f'{m.UP}{{job=~"{jobs}"}} == 0',
            "critical",
            "Prometheus cannot scrape {{ $labels.job }} at {{ $labels.instance }}: GPU and team alerts "
            "that read it are silent.",
            "10m",
        ),
        # One rule (promtool flags two alerting rules of one name and labels): each term keeps its `job`.
        _alert(
            spec,
            "GpuMetricsTargetAbsent",
            " or ".join(f"({expr})" for expr in absent.values()),
            "critical",
            "Prometheus has no {{ $labels.job }} target: GPU and team alerts that read it are silent.",
        ),
    ]
    if spec.teams:
        rules.append(
            _alert(
                spec,
                "KueueMetricsAbsent",
                f"absent({m.KUEUE_NOMINAL}{{{m.KUEUE_LEADER}}})",
                "critical",
                f"No {m.KUEUE_NOMINAL} from Kueue's leader: quota, usage and pending alerts are silent.",
                "15m",
            )
        )
    return rules


def _idle_after(spec: ClusterSpec, team: Team) -> str:
    return team.idle_after or spec.cluster.monitoring.idle_after


def _pending_after(spec: ClusterSpec, team: Team) -> str:
    return team.pending_after or spec.cluster.monitoring.pending_after


def starved_expr(team: Team, wait: str) -> str:
    """Workloads of the team's namespace without `QuotaReserved=True` for longer than `wait`, while the team's
    ClusterQueue admitted others in that time (Kueue admits out of order: a large gang job waits behind a stream
    of small ones). Value: seconds since the workload was created."""
    ns = f'namespace="{team.namespace}"'
    by = "namespace, workload"
    age = f"time() - max by ({by}) ({m.WORKLOAD_CREATED}{{{ns}}})"
    reserved = f'max by ({by}) ({m.WORKLOAD_CONDITION}{{{ns},type="QuotaReserved"}}) == 1'
    admitted = f'sum(increase({m.KUEUE_ADMITTED_TOTAL}{{cluster_queue="{team.name}"}}[{wait}])) > 0'
    return f"(({age}) > {seconds(wait)}) unless on ({by}) ({reserved}) and on () ({admitted})"


def team_rules(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Per team: allocated GPUs idle, GPU workloads waiting or starving, the team at its quota."""
    rules: list[dict[str, Any]] = []
    for team in spec.teams:
        idle = _idle_after(spec, team)
        rules.append(
            _alert(
                spec,
                "GpuAllocatedIdle",
                f'({m.GPU_UTIL}{{namespace="{team.namespace}",pod!=""}} < {m.IDLE_UTIL_PERCENT})'
                f" unless on (UUID) ({m.degenerate_gpus()})",
                "warning",
                f"Pod {{{{ $labels.pod }}}} of team {team.name} holds GPU {{{{ $labels.gpu }}}} on "
                f"{{{{ $labels.Hostname }}}} below {m.IDLE_UTIL_PERCENT}% utilisation for {idle}.",
                idle,
                team=team.name,
            )
        )
        wait = _pending_after(spec, team)
        q = f'cluster_queue="{team.name}"'
        rules.append(
            _alert(
                spec,
                "GpuWorkloadsPendingTooLong",
                f"(sum by (cluster_queue) ({m.KUEUE_PENDING}{{{q},{m.KUEUE_LEADER}}}) > 0)"
                f" unless on (cluster_queue)"
                f" (sum by (cluster_queue) (increase({m.KUEUE_ADMITTED_TOTAL}{{{q}}}[{wait}])) > 0)",
                "warning",
                f"Team {team.name} has had workloads waiting for {wait} with none admitted.",
                wait,
                team=team.name,
            )
        )
        rules.append(
            _alert(
                spec,
                "GpuWorkloadStarved",
                starved_expr(team, wait),
                "warning",
                f"Workload {{{{ $labels.workload }}}} of team {team.name} has waited "
                f"{{{{ $value | humanizeDuration }}}} while the team's other workloads were admitted.",
                "5m",
                team=team.name,
            )
        )
    by = "cluster_queue, flavor, resource"
    gpu = f'resource=~"nvidia.com/.*",{m.KUEUE_LEADER}'
    rules.append(
        _alert(
            spec,
            "TeamAtGpuQuota",
            f"sum by ({by}) ({m.KUEUE_USAGE}{{{gpu}}})"
            f" >= on ({by}) (sum by ({by}) ({m.KUEUE_NOMINAL}{{{gpu}}}) > 0)",
            "info",
            "Team {{ $labels.cluster_queue }} uses all of its {{ $labels.resource }} quota in pool "
            "{{ $labels.flavor }}; more work waits or borrows.",
            "15m",
        )
    )
    return rules


def gpu_unit_rules(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Kueue's allocated and quota gauges in whole GPUs, per (team, pool, resource): a MIG slice is
    1/instances of a GPU and a time-sliced replica 1/replicas (`usage.gpu_factors`, the factors `invoke usage`
    applies), so cost and allocated panels never count slices or replicas as GPUs. One rule per record, its
    terms joined by `or`: each term has its own flavor/resource, so none hides another."""
    by = "cluster_queue, flavor, resource"
    factors = sorted(gpu_factors(spec).items())
    if not factors:
        return []
    rules: list[dict[str, Any]] = []
    for record, metric in ((m.RECORD_ALLOCATED, m.KUEUE_USAGE), (m.RECORD_QUOTA, m.KUEUE_NOMINAL)):
        terms = []
        for (pool, resource), factor in factors:
            term = f'sum by ({by}) ({metric}{{{m.KUEUE_LEADER},flavor="{pool}",resource="{resource}"}})'
            terms.append(term if factor == 1 else f"{term} * {factor!r}")
        rules.append({"record": record, "expr": " or ".join(f"({t})" for t in terms)})
    return rules


def rule_groups(spec: ClusterSpec) -> list[dict[str, Any]]:
    groups = [
        {"name": "gpufleet.gpu-health", "rules": gpu_health_rules(spec)},
        {"name": "gpufleet.meta", "rules": meta_rules(spec)},
        {"name": "gpufleet.teams", "rules": team_rules(spec)},
    ]
    if units := gpu_unit_rules(spec):
        groups.append({"name": "gpufleet.gpu-units", "rules": units})
    return groups + extender.rule_group(spec)


def alerts(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every alerting rule (recording rules left out)."""
    return [r for g in rule_groups(spec) for r in g["rules"] if "alert" in r]
