"""gpufleet's alert rules, as Prometheus rule groups (the body of a PrometheusRule, or a promtool rule file).

What each alert means and what to do is in docs/operations.md (the `runbook` annotation points there). Notes on
the choice of expressions:
- XID: dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS` is the *last* XID seen on the GPU, so it fires while that value
  stays non-zero; 79 is "GPU has fallen off the bus" (NVIDIA XID catalogue) and gets its own critical alert;
- ECC, row remapping and NVLink are counters: any increase is a fault (double-bit ECC and uncorrectable row
  remaps lose data; a failed row remap means the GPU needs a reset or replacement);
- throttling counters count nanoseconds throttled, so `rate(...) / 1e9` is the fraction of time throttled;
- idle, pending and quota thresholds come from the spec, per team (a team's `idleAfter`/`pendingAfter`).
"""

from __future__ import annotations

from typing import Any

from infra.monitoring import metrics as m
from infra.spec import ClusterSpec, Team

RUNBOOK = "docs/operations.md#"  # relative to the gpufleet repository
GPU_LABELS = "Hostname, gpu, UUID"


def _alert(
    name: str, expr: str, severity: str, summary: str, for_: str = "0m", **labels: str
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": summary, "runbook_url": RUNBOOK + name.lower()},
    }


def gpu_health_rules() -> list[dict[str, Any]]:
    nvlink = "|".join(m.NVLINK_ERRORS)
    return [
        _alert(
            "GpuFallenOffBus",
            f"{m.XID} == 79",
            "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} has fallen off the bus (XID 79).",
        ),
        _alert(
            "GpuXidError",
            f"{m.XID} != 0 and {m.XID} != 79",
            "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}.",
        ),
        _alert(
            "GpuDoubleBitEccError",
            f"increase({m.ECC_DBE_VOLATILE}[10m]) > 0",
            "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} had double-bit ECC errors.",
        ),
        _alert(
            "GpuRowRemapFailure",
            f"{m.ROW_REMAP_FAILURE} > 0 or increase({m.UNCORRECTABLE_REMAPPED_ROWS}[10m]) > 0",
            "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} failed to remap a row or remapped an uncorrectable one.",
        ),
        _alert(
            "GpuNvlinkErrors",
            f'sum by ({GPU_LABELS}) (increase({{__name__=~"{nvlink}"}}[10m])) > 0',
            "warning",
            "NVLink errors on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}.",
        ),
        _alert(
            "GpuThermalThrottling",
            f"rate({m.THERMAL_VIOLATION}[5m]) / 1e9 > 0.1",
            "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is thermally throttled {{ $value | humanizePercentage }} of the time.",
            "10m",
        ),
        _alert(
            "GpuPowerThrottling",
            f"rate({m.POWER_VIOLATION}[5m]) / 1e9 > 0.5",
            "info",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is power-capped {{ $value | humanizePercentage }} of the time.",
            "30m",
        ),
        _alert(
            "GpuNodeNotReady",
            f'({m.NODE_CONDITION}{{condition="Ready",status="true"}} == 0)'
            f" * on (node) group_left ({m.POOL_LABEL_METRIC})"
            f' ({m.NODE_LABELS}{{{m.POOL_LABEL_METRIC}!=""}} * 0 + 1)',
            "critical",
            "Node {{ $labels.node }} of GPU pool {{ $labels." + m.POOL_LABEL_METRIC + " }} is not ready.",
            "5m",
        ),
    ]


def _idle_after(spec: ClusterSpec, team: Team) -> str:
    return team.idle_after or spec.cluster.monitoring.idle_after


def _pending_after(spec: ClusterSpec, team: Team) -> str:
    return team.pending_after or spec.cluster.monitoring.pending_after


def team_rules(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Per team: allocated GPUs idle, GPU workloads waiting, the team at its quota."""
    rules: list[dict[str, Any]] = []
    for team in spec.teams:
        idle = _idle_after(spec, team)
        rules.append(
            _alert(
                "GpuAllocatedIdle",
                f'{m.GPU_UTIL}{{namespace="{team.namespace}",pod!=""}} < {m.IDLE_UTIL_PERCENT}',
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
                "GpuWorkloadsPendingTooLong",
                f"(sum by (cluster_queue) ({m.KUEUE_PENDING}{{{q}}}) > 0)"
                f" unless on (cluster_queue)"
                f" (sum by (cluster_queue) (increase({m.KUEUE_ADMITTED_TOTAL}{{{q}}}[{wait}])) > 0)",
                "warning",
                f"Team {team.name} has had workloads waiting for {wait} with none admitted.",
                wait,
                team=team.name,
            )
        )
    by = "cluster_queue, flavor, resource"
    gpu = 'resource=~"nvidia.com/.*"'
    rules.append(
        _alert(
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


def rule_groups(spec: ClusterSpec) -> list[dict[str, Any]]:
    return [
        {"name": "gpufleet.gpu-health", "rules": gpu_health_rules()},
        {"name": "gpufleet.teams", "rules": team_rules(spec)},
    ]
