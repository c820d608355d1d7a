"""Alert and recording rules against the real tools: `promtool check rules` and `promtool test rules` of
Prometheus 3.x (fire and stay silent; recorded values), the PrometheusRule CRD of the Prometheus operator
(v0.93.0), and the metric names the exporters really publish.

The input series carry the labels the exporters really give them: dcgm-exporter's `Hostname`, `gpu`, `UUID` and
the pod mapping's `namespace`/`pod` (with per-pod copies of a shared GPU), Kueue's `replica_role` with both
replicas reporting the gauges, and kube-state-metrics twice over (a rollout) where a rule joins with it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.monitoring import metrics as m
from infra.monitoring.alerts import HARDWARE_XIDS, alerts, rule_groups
from infra.monitoring.stack import prometheus_rule
from scheduler.validation import crd_problems, load_crd_schemas
from tests.monitoring.conftest import ops_spec, run_promtool

SPEC = ops_spec()
RULES = {"groups": rule_groups(SPEC)}
# PromQL words that look like metric names but are functions, keywords or label names.
NOT_METRICS = frozenset(
    [
        "sum",
        "by",
        "on",
        "unless",
        "and",
        "or",
        "count",
        "avg",
        "max",
        "min",
        "increase",
        "rate",
        "group_left",
        "histogram_quantile",
        "vector",
        "sum_over_time",
        "e9",
        "le",
        "time",
        "absent",
        "absent_over_time",
    ]
)


def metric_names(expr: str) -> set[str]:
    """Names of series an expression selects: bare identifiers outside {…} and [..], plus __name__ regexes."""
    names = set()
    for regex in re.findall(r'__name__=~"([^"]+)"', expr):
        names |= set(regex.split("|"))
    stripped = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)
    stripped = re.sub(r"\b(by|on|group_left|without)\s*\([^)]*\)", " ", stripped)
    for word in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped):
        if word not in NOT_METRICS and not re.fullmatch(r"\d+e\d+", word):
            names.add(re.sub(r"_(bucket|sum|count)$", "", word) if word.startswith("kueue_") else word)
    return names


@pytest.fixture(scope="module")
def rule_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "gpufleet-rules.yaml"
    path.write_text(yaml.safe_dump(RULES, sort_keys=False))
    return path


def test_promtool_checks_every_rule(promtool: str, rule_file: Path) -> None:
    """promtool 3.x parses each expression and template (Prometheus `promtool check rules`)."""
    result = run_promtool(promtool, "check", "rules", str(rule_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in RULES['groups'])} rules found" in result.stdout


def test_the_rules_are_checked_by_prometheus_3(promtool: str) -> None:
    """The chart's Prometheus is v3.14.0 (kube-prometheus-stack 88.5.3), so the rules are proven on 3.x."""
    from tests.monitoring.conftest import major_version

    assert major_version(Path(promtool)) == 3


def test_promtool_rejects_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    bad = {"groups": [{"name": "x", "rules": [{"alert": "X", "expr": "sum by (gpu DCGM_FI_DEV_GPU_UTIL"}]}]}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert run_promtool(promtool, "check", "rules", str(tmp_path / "bad.yaml")).returncode != 0


def test_rules_name_only_metrics_the_stack_exports() -> None:
    used = {name for g in RULES["groups"] for r in g["rules"] for name in metric_names(r["expr"])}
    assert used - m.EXPORTED == set()
    assert {
        m.XID_COUNT,
        m.ECC_DBE_VOLATILE,
        m.ROW_REMAP_PENDING,
        *m.NVLINK_ERRORS,
        m.THERMAL_VIOLATION,
    } <= used
    assert {m.KUEUE_PENDING, m.KUEUE_USAGE, m.KUEUE_NOMINAL, m.NODE_CONDITION, m.NODE_CAPACITY, m.UP} <= used
    assert m.XID not in used, "the last-XID gauge is sticky: dashboards only"


def test_every_kueue_gauge_is_read_from_the_leader() -> None:
    """Kueue v0.19.2 pkg/metrics/metrics.go: pending_workloads, cluster_queue_resource_usage and
    cluster_queue_nominal_quota carry `replica_role`, and the follower reports them too (kueue#9487), so a
    selector without the role counts every workload and GPU twice."""
    gauges = (m.KUEUE_PENDING, m.KUEUE_USAGE, m.KUEUE_NOMINAL)
    exprs = [r["expr"] for g in RULES["groups"] for r in g["rules"]]
    selectors = [sel for e in exprs for g in gauges for sel in re.findall(rf"{g}(\{{[^}}]*\}})?", e)]
    assert selectors and all(m.KUEUE_LEADER in sel for sel in selectors), selectors


def test_every_join_with_kube_state_metrics_dedupes_it_first() -> None:
    """PromQL `group_left` fails with "found duplicate series for the match group" when the right side has two
    series per node (two kube-state-metrics replicas, or a rollout): every join reads `max by (node, ...)`."""
    for rule in alerts(SPEC):
        for right in re.findall(r"group_left \([^)]*\) (\S+)", rule["expr"]):
            assert right == "max", rule["expr"]


def _csv_fields(text: str) -> dict[str, str]:
    """dcgm-exporter CSV -> {field: type}, commented-out lines included (they name real, optional fields)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.lstrip("# ").strip()
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].startswith("DCGM_"):
            if raw.startswith("DCGM_"):  # an enabled line's type wins over a commented-out one
                out[parts[0]] = parts[1]
            else:
                out.setdefault(parts[0], parts[1])
    return out


def test_our_dcgm_counter_list_uses_real_fields_with_their_types(shared_dir: Path) -> None:
    """Every line of our list is one of dcgm-exporter's own (etc/default-counters.csv at 4.5.3-4.8.2), enabled
    there or listed commented out, with the same Prometheus type; all of its enabled defaults stay enabled."""
    upstream_text = (shared_dir / "metrics/dcgm-exporter/default-counters.csv").read_text()
    upstream = _csv_fields(upstream_text)
    ours = {f: t for f, t in _csv_fields(m.dcgm_counters_csv()).items() if f not in m.EXTRA_DCGM_FIELDS}
    assert {f: ours[f] for f in ours if upstream.get(f) != ours[f]} == {}
    # The windowed XID count is listed commented out upstream, as a counter.
    assert upstream[m.XID_COUNT] == "counter" and m.XID_COUNT in ours
    enabled = {
        line.split(",")[0].strip()
        for line in upstream_text.splitlines()
        if line.startswith("DCGM_") and "," in line
    }
    assert enabled - set(ours) == set()
    assert {m.ECC_DBE_VOLATILE, *m.NVLINK_ERRORS, m.THERMAL_VIOLATION, m.POWER_VIOLATION} - enabled == {
        m.ECC_DBE_VOLATILE,
        *m.NVLINK_ERRORS,
        m.THERMAL_VIOLATION,
        m.POWER_VIOLATION,
    }, "these are off by default upstream: the reason we ship our own list"


def test_prometheus_rule_matches_the_operator_crd(shared_dir: Path) -> None:
    schemas = load_crd_schemas(shared_dir / "crds/prometheus-operator")
    rule = prometheus_rule(SPEC)
    assert crd_problems(rule, schemas) == []
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    broken = {**rule, "spec": {"groups": [{"rules": [{"alert": "X", "expr": "1", "for": "ten minutes"}]}]}}
    assert crd_problems(broken, schemas)  # no group name, bad duration


def test_row_remap_pending_is_a_dcgm_field_dcgm_exporter_resolves() -> None:
    """dcgm-exporter turns each CSV name into a field id with go-dcgm's `dcgm.GetFieldID` (4.5.3-4.8.2
    internal/pkg/counters/counter_config.go); go-dcgm's table (pkg/dcgm/const_fields.go at the version
    dcgm-exporter pins, ec245c09fe3e) has `DCGM_FI_DEV_ROW_REMAP_PENDING: 396`, a 0/1 gauge "Whether remapping
    of rows is pending". It is the only field we collect that upstream's CSVs do not list."""
    assert {m.ROW_REMAP_PENDING} == m.EXTRA_DCGM_FIELDS
    assert (m.ROW_REMAP_PENDING, "gauge", "Whether remapping of rows is pending") in m.DCGM_COUNTERS


def test_application_xids_never_alert() -> None:
    """NVIDIA's XID catalogue: 13, 31, 43 and 45 are the job's own faults or exits (immediate action
    RESTART_APP); they are logged on busy GPUs all the time and must not page."""
    assert not {13, 31, 43, 45} & set(HARDWARE_XIDS)
    assert {48, 64, 74, 94, 95} <= set(HARDWARE_XIDS)


# ---- promtool test rules ------------------------------------------------------------------------------------

GPU0 = 'Hostname="gpu-1",gpu="0",UUID="GPU-0"'
GPU1 = 'Hostname="gpu-1",gpu="1",UUID="GPU-1"'
GPU2 = 'Hostname="gpu-1",gpu="2",UUID="GPU-2"'
POOL = m.POOL_LABEL_METRIC
LEADER = 'replica_role="leader"'
FOLLOWER = 'replica_role="follower"'
# kube-state-metrics twice over, as during a rollout: the rules must not fail on duplicate series.
KSM = ('job="kube-state-metrics",instance="ksm-a"', 'job="kube-state-metrics",instance="ksm-b"')


def _alert(name: str, summary: str, **labels: str) -> dict[str, Any]:
    rule = next(r for r in alerts(SPEC) if r["alert"] == name)
    return {
        "exp_labels": {**rule["labels"], **labels},
        "exp_annotations": {"summary": summary, "runbook": f"docs/operations.md#{name.lower()}"},
    }


def _case(series: dict[str, str], checks: list[tuple[str, str, list[dict[str, Any]]]]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": exp} for t, a, exp in checks],
    }


def _ksm(name: str, labels: str, values: str) -> dict[str, str]:
    return {f"{name}{{{labels},{k}}}": values for k in KSM}


def _tests() -> list[dict[str, Any]]:
    gpu = {"Hostname": "gpu-1", "gpu": "0", "UUID": "GPU-0"}
    gpu1 = {"Hostname": "gpu-1", "gpu": "1", "UUID": "GPU-1"}
    gpu2 = {"Hostname": "gpu-1", "gpu": "2", "UUID": "GPU-2"}
    capacity = m.NODE_CAPACITY
    res = f'resource="{m.GPU_RESOURCE_METRIC}",unit="integer"'
    return [
        # The windowed XID count: 79 fires the fallen-off-bus alert, 48 the hardware one; 13 (an application
        # fault) neither, even with the sticky last-XID gauge at 13 all along.
        _case(
            {
                f'{m.XID_COUNT}{{{GPU0},xid="79"}}': "0 0 1 1",
                f'{m.XID_COUNT}{{{GPU1},xid="13"}}': "0 0 3 3",
                f"{m.XID}{{{GPU1}}}": "13x4",
                f'{m.XID_COUNT}{{{GPU2},xid="48"}}': "0 0 2 2",
            },
            [
                ("1m", "GpuFallenOffBus", []),
                ("1m", "GpuHardwareXid", []),
                (
                    "3m",
                    "GpuFallenOffBus",
                    [
                        _alert(
                            "GpuFallenOffBus",
                            "GPU 0 on gpu-1 has fallen off the bus (XID 79).",
                            xid="79",
                            **gpu,
                        )
                    ],
                ),
                (
                    "3m",
                    "GpuHardwareXid",
                    [_alert("GpuHardwareXid", "GPU 2 on gpu-1 reported hardware XID 48.", xid="48", **gpu2)],
                ),
            ],
        ),
        # A GPU stops reporting (its series goes stale): gpu-1 has 8 GPUs by capacity and 7 in DCGM, for 10
        # minutes. GPU-0 is shared by two pods (two series, one GPU). gpu-2 reports nothing at all; cpu-1 has
        # no GPUs and never alerts.
        _case(
            {
                **{
                    f'{m.GPU_TEMP}{{Hostname="gpu-1",node="gpu-1",gpu="{i}",UUID="GPU-{i}"}}': "60x30"
                    for i in range(1, 7)
                },
                f'{m.GPU_TEMP}{{Hostname="gpu-1",node="gpu-1",gpu="7",UUID="GPU-7"}}': "60x5 stale",
                f'{m.GPU_TEMP}{{Hostname="gpu-1",node="gpu-1",gpu="0",UUID="GPU-0",pod="a"}}': "60x30",
                f'{m.GPU_TEMP}{{Hostname="gpu-1",node="gpu-1",gpu="0",UUID="GPU-0",pod="b"}}': "60x30",
                **_ksm(capacity, f'node="gpu-1",{res}', "8x30"),
                **_ksm(capacity, f'node="gpu-2",{res}', "4x30"),
                **_ksm(capacity, f'node="cpu-1",{res}', "0x30"),
            },
            [
                ("5m", "GpuMissingFromDcgm", []),
                (
                    "20m",
                    "GpuMissingFromDcgm",
                    [
                        _alert(
                            "GpuMissingFromDcgm",
                            "Node gpu-1 has 8 GPUs but dcgm-exporter reports fewer: a GPU fell off the bus or "
                            "the exporter lost it.",
                            node="gpu-1",
                        ),
                        _alert(
                            "GpuMissingFromDcgm",
                            "Node gpu-2 has 4 GPUs but dcgm-exporter reports fewer: a GPU fell off the bus or "
                            "the exporter lost it.",
                            node="gpu-2",
                        ),
                    ],
                ),
            ],
        ),
        # The device plugin marks one GPU of gpu-1 unhealthy: allocatable drops below capacity.
        _case(
            {
                **_ksm(capacity, f'node="gpu-1",{res}', "8x20"),
                **_ksm(m.NODE_ALLOCATABLE, f'node="gpu-1",{res}', "8x5 7x15"),
                **_ksm(capacity, f'node="gpu-2",{res}', "8x20"),
                **_ksm(m.NODE_ALLOCATABLE, f'node="gpu-2",{res}', "8x20"),
            },
            [
                ("8m", "GpuDevicePluginUnhealthy", []),
                (
                    "12m",
                    "GpuDevicePluginUnhealthy",
                    [
                        _alert(
                            "GpuDevicePluginUnhealthy",
                            "The device plugin marked 1 GPU(s) of node gpu-1 unhealthy.",
                            node="gpu-1",
                        )
                    ],
                ),
            ],
        ),
        # Double-bit ECC is a level: already non-zero at the first scrape (the exporter restarted after the
        # error) it fires at once, and still fires an hour later; a zero counter never does.
        _case(
            {f"{m.ECC_DBE_VOLATILE}{{{GPU0}}}": "2x70", f"{m.ECC_DBE_VOLATILE}{{{GPU1}}}": "0x70"},
            [
                (
                    "0m",
                    "GpuDoubleBitEccError",
                    [
                        _alert(
                            "GpuDoubleBitEccError",
                            "GPU 0 on gpu-1 has had 2 double-bit ECC errors since its last reset.",
                            **gpu,
                        )
                    ],
                ),
                (
                    "65m",
                    "GpuDoubleBitEccError",
                    [
                        _alert(
                            "GpuDoubleBitEccError",
                            "GPU 0 on gpu-1 has had 2 double-bit ECC errors since its last reset.",
                            **gpu,
                        )
                    ],
                ),
            ],
        ),
        _case(
            {
                f"{m.ROW_REMAP_PENDING}{{{GPU0}}}": "0 1x70",
                f"{m.ROW_REMAP_FAILURE}{{{GPU1}}}": "0 0 1x70",
                f"{m.ROW_REMAP_FAILURE}{{{GPU0}}}": "0x70",
            },
            [
                ("0m", "GpuRowRemapPending", []),
                ("1m", "GpuRowRemapFailure", []),
                (
                    "60m",
                    "GpuRowRemapPending",
                    [
                        _alert(
                            "GpuRowRemapPending",
                            "GPU 0 on gpu-1 has a row remap pending: it needs a GPU reset.",
                            **gpu,
                        )
                    ],
                ),
                (
                    "60m",
                    "GpuRowRemapFailure",
                    [_alert("GpuRowRemapFailure", "GPU 1 on gpu-1 failed to remap a memory row.", **gpu1)],
                ),
            ],
        ),
        _case(
            {f"{m.NVLINK_ERRORS[2]}{{{GPU0}}}": "0x5 4x5", f"{m.NVLINK_ERRORS[0]}{{{GPU1}}}": "9x10"},
            [
                ("4m", "GpuNvlinkErrors", []),
                (
                    "8m",
                    "GpuNvlinkErrors",
                    [_alert("GpuNvlinkErrors", "NVLink errors on GPU 0 of gpu-1.", **gpu)],
                ),
            ],
        ),
        # Thermal: throttled 30 s of every minute (50%) for 10 minutes fires; 3 s a minute (5%) never does.
        _case(
            {
                f"{m.THERMAL_VIOLATION}{{{GPU0}}}": "0+30000000000x30",
                f"{m.THERMAL_VIOLATION}{{{GPU1}}}": "0+3000000000x30",
            },
            [
                ("8m", "GpuThermalThrottling", []),
                (
                    "20m",
                    "GpuThermalThrottling",
                    [
                        _alert(
                            "GpuThermalThrottling",
                            "GPU 0 on gpu-1 is thermally throttled 50% of the time.",
                            **gpu,
                        )
                    ],
                ),
            ],
        ),
        _case(
            {
                f"{m.POWER_VIOLATION}{{{GPU0}}}": "0+54000000000x60",
                f"{m.POWER_VIOLATION}{{{GPU1}}}": "0+6000000000x60",
            },
            [
                ("20m", "GpuPowerThrottling", []),
                (
                    "50m",
                    "GpuPowerThrottling",
                    [_alert("GpuPowerThrottling", "GPU 0 on gpu-1 is power-capped 90% of the time.", **gpu)],
                ),
            ],
        ),
        # A GPU pool node not ready for 5 minutes fires; a non-GPU node (no pool label) never does. Both
        # kube-state-metrics replicas report every series.
        _case(
            {
                **_ksm(m.NODE_CONDITION, 'node="gpu-1",condition="Ready",status="true"', "1 1 0x10"),
                **_ksm(m.NODE_CONDITION, 'node="cpu-1",condition="Ready",status="true"', "1 1 0x10"),
                **_ksm(m.NODE_LABELS, f'node="gpu-1",{POOL}="h100-train"', "1x12"),
                **_ksm(m.NODE_LABELS, 'node="cpu-1"', "1x12"),
            },
            [
                ("5m", "GpuNodeNotReady", []),
                (
                    "8m",
                    "GpuNodeNotReady",
                    [
                        _alert(
                            "GpuNodeNotReady",
                            "Node gpu-1 of GPU pool h100-train is not ready.",
                            node="gpu-1",
                            **{POOL: "h100-train"},
                        )
                    ],
                ),
            ],
        ),
        # A target down for 10 minutes; dcgm-exporter and Kueue with no target at all while a node has GPUs.
        _case(
            {
                f'up{{job="{m.KSM_JOB}",instance="ksm-a"}}': "1x20",
                f'up{{job="{m.DCGM_JOB}",instance="10.0.0.7:9400"}}': "1 1 0x18",
                **_ksm(capacity, f'node="gpu-1",{res}', "8x20"),
                f'{m.KUEUE_NOMINAL}{{cluster_queue="research",flavor="h100-train",resource="nvidia.com/gpu",{LEADER}}}': "8x20",
            },
            [
                ("10m", "GpuMetricsTargetDown", []),
                (
                    "13m",
                    "GpuMetricsTargetDown",
                    [
                        _alert(
                            "GpuMetricsTargetDown",
                            f"Prometheus cannot scrape {m.DCGM_JOB} at 10.0.0.7:9400: GPU and team alerts that "
                            "read it are silent.",
                            job=m.DCGM_JOB,
                            instance="10.0.0.7:9400",
                        )
                    ],
                ),
                (
                    "13m",
                    "GpuMetricsTargetAbsent",
                    [
                        _alert(
                            "GpuMetricsTargetAbsent",
                            f"Prometheus has no {m.KUEUE_JOB} target: GPU and team alerts that read it are silent.",
                            job=m.KUEUE_JOB,
                        )
                    ],
                ),
                ("16m", "KueueMetricsAbsent", []),
            ],
        ),
        _case(
            {
                f'up{{job="{m.KSM_JOB}",instance="ksm-a"}}': "1x20",
                **_ksm(capacity, f'node="gpu-1",{res}', "8x20"),
                f'up{{job="{m.KUEUE_JOB}",instance="10.0.0.9:8443"}}': "1x20",
                # Only the follower reports the gauge: the leader's are what count.
                f'{m.KUEUE_NOMINAL}{{cluster_queue="research",flavor="h100-train",resource="nvidia.com/gpu",{FOLLOWER}}}': "8x20",
            },
            [
                (
                    "5m",
                    "GpuMetricsTargetAbsent",
                    [
                        _alert(
                            "GpuMetricsTargetAbsent",
                            f"Prometheus has no {m.DCGM_JOB} target: GPU and team alerts that read it are silent.",
                            job=m.DCGM_JOB,
                        )
                    ],
                ),
                ("10m", "KueueMetricsAbsent", []),
                (
                    "16m",
                    "KueueMetricsAbsent",
                    [
                        _alert(
                            "KueueMetricsAbsent",
                            f"No {m.KUEUE_NOMINAL} from Kueue's leader: quota, usage and pending alerts are silent.",
                            replica_role="leader",
                        )
                    ],
                ),
            ],
        ),
        # No GPU capacity anywhere (pools scaled to zero): no dcgm-exporter target is expected.
        _case(
            {
                f'up{{job="{m.KSM_JOB}",instance="ksm-a"}}': "1x20",
                f'up{{job="{m.KUEUE_JOB}",instance="10.0.0.9:8443"}}': "1x20",
                **_ksm(capacity, f'node="cpu-1",{res}', "0x20"),
            },
            [("15m", "GpuMetricsTargetAbsent", [])],
        ),
        # Idle: llm-training's threshold is 30m, research keeps the default 2h; unallocated GPUs never count.
        _case(
            {
                f'{m.GPU_UTIL}{{{GPU0},namespace="team-llm",pod="train-0"}}': "1x200",
                f'{m.GPU_UTIL}{{{GPU1},namespace="team-research",pod="nb-0"}}': "0x200",
                f'{m.GPU_UTIL}{{Hostname="gpu-2",gpu="0",UUID="GPU-2"}}': "0x200",
                f'{m.GPU_UTIL}{{Hostname="gpu-2",gpu="1",UUID="GPU-3",namespace="team-llm",pod="busy"}}': "90x200",
            },
            [
                ("29m", "GpuAllocatedIdle", []),
                (
                    "31m",
                    "GpuAllocatedIdle",
                    [
                        _alert(
                            "GpuAllocatedIdle",
                            "Pod train-0 of team llm-training holds GPU 0 on gpu-1 below 5% utilisation for 30m.",
                            team="llm-training",
                            namespace="team-llm",
                            pod="train-0",
                            **gpu,
                        )
                    ],
                ),
            ],
        ),
        _case(
            {f'{m.GPU_UTIL}{{{GPU1},namespace="team-research",pod="nb-0"}}': "0x200"},
            [
                ("119m", "GpuAllocatedIdle", []),
                (
                    "121m",
                    "GpuAllocatedIdle",
                    [
                        _alert(
                            "GpuAllocatedIdle",
                            "Pod nb-0 of team research holds GPU 1 on gpu-1 below 5% utilisation for 2h.",
                            team="research",
                            namespace="team-research",
                            pod="nb-0",
                            **gpu1,
                        )
                    ],
                ),
            ],
        ),
        # Pending: inference (default 1h) waits with no admission; llm-training waits but keeps admitting;
        # batch's pending workloads are the follower's stale view (the leader says none).
        _case(
            {
                f'{m.KUEUE_PENDING}{{cluster_queue="inference",status="active",{LEADER}}}': "3x120",
                f'{m.KUEUE_PENDING}{{cluster_queue="inference",status="active",{FOLLOWER}}}': "3x120",
                f'{m.KUEUE_ADMITTED_TOTAL}{{cluster_queue="inference",priority_class="production",{LEADER}}}': "5x120",
                f'{m.KUEUE_PENDING}{{cluster_queue="llm-training",status="active",{LEADER}}}': "2x120",
                f'{m.KUEUE_ADMITTED_TOTAL}{{cluster_queue="llm-training",priority_class="production",{LEADER}}}': "0+1x120",
                f'{m.KUEUE_PENDING}{{cluster_queue="batch",status="active",{LEADER}}}': "0x120",
                f'{m.KUEUE_PENDING}{{cluster_queue="batch",status="active",{FOLLOWER}}}': "4x120",
            },
            [
                ("50m", "GpuWorkloadsPendingTooLong", []),
                (
                    "80m",
                    "GpuWorkloadsPendingTooLong",
                    [
                        _alert(
                            "GpuWorkloadsPendingTooLong",
                            "Team inference has had workloads waiting for 1h with none admitted.",
                            team="inference",
                            cluster_queue="inference",
                        )
                    ],
                ),
            ],
        ),
        # Starvation: llm-training's gang job big-0 (QuotaReserved=False) was created at 0 and keeps waiting
        # while small jobs are admitted; small-0 got its quota. inference's waiting workload is the other alert's
        # case (nothing admitted at all). Creation times are Unix seconds, `time()` the evaluation time.
        _case(
            {
                **_ksm(m.WORKLOAD_CREATED, 'namespace="team-llm",workload="big-0",queue="llm"', "0x90"),
                **_ksm(
                    m.WORKLOAD_CONDITION,
                    'namespace="team-llm",workload="big-0",queue="llm",type="QuotaReserved"',
                    "0x90",
                ),
                **_ksm(m.WORKLOAD_CREATED, 'namespace="team-llm",workload="small-0",queue="llm"', "0x90"),
                **_ksm(
                    m.WORKLOAD_CONDITION,
                    'namespace="team-llm",workload="small-0",queue="llm",type="QuotaReserved"',
                    "1x90",
                ),
                f'{m.KUEUE_ADMITTED_TOTAL}{{cluster_queue="llm-training",priority_class="production",{LEADER}}}': "0+1x90",
                **_ksm(
                    m.WORKLOAD_CREATED,
                    'namespace="team-inference",workload="inf-0",queue="inference"',
                    "0x90",
                ),
                f'{m.KUEUE_ADMITTED_TOTAL}{{cluster_queue="inference",priority_class="production",{LEADER}}}': "5x90",
            },
            [
                ("50m", "GpuWorkloadStarved", []),
                (
                    "70m",
                    "GpuWorkloadStarved",
                    [
                        _alert(
                            "GpuWorkloadStarved",
                            "Workload big-0 of team llm-training has waited 1h 10m 0s while the team's other "
                            "workloads were admitted.",
                            team="llm-training",
                            namespace="team-llm",
                            workload="big-0",
                        )
                    ],
                ),
            ],
        ),
        # Quota: research uses all 8 h100-train GPUs for 15m; inference uses 10 of 16 l40s, which the follower
        # (not electing, stale) reports as 16: only the leader's numbers count.
        _case(
            {
                f'{m.KUEUE_USAGE}{{cluster_queue="research",flavor="h100-train",resource="nvidia.com/gpu",cohort="gpufleet",{LEADER}}}': "8x30",
                f'{m.KUEUE_NOMINAL}{{cluster_queue="research",flavor="h100-train",resource="nvidia.com/gpu",cohort="gpufleet",{LEADER}}}': "8x30",
                f'{m.KUEUE_USAGE}{{cluster_queue="inference",flavor="l40s-infer",resource="nvidia.com/gpu",cohort="gpufleet",{LEADER}}}': "10x30",
                f'{m.KUEUE_USAGE}{{cluster_queue="inference",flavor="l40s-infer",resource="nvidia.com/gpu",cohort="gpufleet",{FOLLOWER}}}': "16x30",
                f'{m.KUEUE_NOMINAL}{{cluster_queue="inference",flavor="l40s-infer",resource="nvidia.com/gpu",cohort="gpufleet",{LEADER}}}': "16x30",
            },
            [
                ("10m", "TeamAtGpuQuota", []),
                (
                    "20m",
                    "TeamAtGpuQuota",
                    [
                        _alert(
                            "TeamAtGpuQuota",
                            "Team research uses all of its nvidia.com/gpu quota in pool h100-train; more work waits or borrows.",
                            cluster_queue="research",
                            flavor="h100-train",
                            resource="nvidia.com/gpu",
                        )
                    ],
                ),
            ],
        ),
    ]


def _units_case() -> dict[str, Any]:
    """The whole-GPU recording rules: 7 MIG 1g.10gb slices are one H100, 4 time-sliced replicas one A10G, and
    the follower's copy of every gauge counts nothing."""
    q = 'cohort="gpufleet"'
    series = {
        f'{m.KUEUE_USAGE}{{cluster_queue="research",flavor="h100-mig",resource="nvidia.com/mig-1g.10gb",{q},{LEADER}}}': "7x5",
        f'{m.KUEUE_USAGE}{{cluster_queue="research",flavor="h100-mig",resource="nvidia.com/mig-1g.10gb",{q},{FOLLOWER}}}': "7x5",
        f'{m.KUEUE_USAGE}{{cluster_queue="batch",flavor="a10g-batch",resource="nvidia.com/gpu.shared",{q},{LEADER}}}': "4x5",
        f'{m.KUEUE_USAGE}{{cluster_queue="batch",flavor="h100-train",resource="nvidia.com/gpu",{q},{LEADER}}}': "3x5",
        f'{m.KUEUE_NOMINAL}{{cluster_queue="batch",flavor="a10g-batch",resource="nvidia.com/gpu.shared",{q},{LEADER}}}': "8x5",
    }
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "promql_expr_test": [
            {
                "expr": f"sum by (cluster_queue) ({m.RECORD_ALLOCATED})",
                "eval_time": "3m",
                "exp_samples": [
                    {"labels": '{cluster_queue="research"}', "value": 1.0},
                    {"labels": '{cluster_queue="batch"}', "value": 4.0},
                ],
            },
            {
                "expr": f'{m.RECORD_QUOTA}{{flavor="a10g-batch"}}',
                "eval_time": "3m",
                "exp_samples": [
                    {
                        "labels": f'{m.RECORD_QUOTA}{{cluster_queue="batch",flavor="a10g-batch",resource="nvidia.com/gpu.shared"}}',
                        "value": 2.0,
                    }
                ],
            },
        ],
    }


def _run(promtool: str, rule_file: Path, tests: list[dict[str, Any]], name: str) -> Any:
    spec_file = rule_file.parent / name
    spec_file.write_text(
        yaml.safe_dump(
            {"rule_files": [rule_file.name], "evaluation_interval": "1m", "tests": tests}, sort_keys=False
        )
    )
    return run_promtool(promtool, "test", "rules", spec_file.name, cwd=rule_file.parent)


def test_every_alert_fires_and_stays_silent_where_it_should(promtool: str, rule_file: Path) -> None:
    """`promtool test rules` evaluates the rules over synthetic series exactly as Prometheus 3.x would."""
    tests = _tests()
    covered = {c["alertname"] for t in tests for c in t["alert_rule_test"]}
    assert covered == {r["alert"] for r in alerts(SPEC)}
    result = _run(promtool, rule_file, tests, "gpufleet-rules.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_gpu_nodes_that_run_no_exporter_by_design_stay_silent(promtool: str, rule_file: Path) -> None:
    """A Bottlerocket GPU node (GPU operator operands off: `nvidia.com/gpu.deploy.operands=false`, which
    kube-state-metrics exports as an allow-listed label) advertises `nvidia.com/gpu` but runs no dcgm-exporter:
    neither GpuMissingFromDcgm nor GpuMetricsTargetAbsent fires for it, also when it is the only GPU node. An
    ordinary GPU node without DCGM series still raises both."""
    res = f'resource="{m.GPU_RESOURCE_METRIC}",unit="integer"'
    operands_off = f'node="br-1",{POOL}="l40s-infer",{m.OPERANDS_LABEL_METRIC}="false"'
    present = {
        f'up{{job="{m.KSM_JOB}",instance="ksm-a"}}': "1x30",
        f'up{{job="{m.KUEUE_JOB}",instance="10.0.0.9:8443"}}': "1x30",
        **_ksm(m.NODE_CAPACITY, f'node="br-1",{res}', "4x30"),
        **_ksm(m.NODE_LABELS, operands_off, "1x30"),
    }
    only_bottlerocket = _case(
        present, [("20m", "GpuMissingFromDcgm", []), ("20m", "GpuMetricsTargetAbsent", [])]
    )
    with_ordinary = _case(
        {
            **present,
            **_ksm(m.NODE_CAPACITY, f'node="gpu-1",{res}', "8x30"),
            **_ksm(m.NODE_LABELS, f'node="gpu-1",{POOL}="h100-train"', "1x30"),
        },
        [
            (
                "20m",
                "GpuMissingFromDcgm",
                [
                    _alert(
                        "GpuMissingFromDcgm",
                        "Node gpu-1 has 8 GPUs but dcgm-exporter reports fewer: a GPU fell off the bus or "
                        "the exporter lost it.",
                        node="gpu-1",
                    )
                ],
            ),
            (
                "20m",
                "GpuMetricsTargetAbsent",
                [
                    _alert(
                        "GpuMetricsTargetAbsent",
                        f"Prometheus has no {m.DCGM_JOB} target: GPU and team alerts that read it are silent.",
                        job=m.DCGM_JOB,
                    )
                ],
            ),
        ],
    )
    result = _run(promtool, rule_file, [only_bottlerocket, with_ordinary], "gpufleet-operands-off.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_idle_alert_does_not_believe_a_zero_on_a_busy_gpu(promtool: str, rule_file: Path) -> None:
    """dcgm-exporter's per-process mode gives a pod it cannot map to a process "0" and keeps the GPU's own
    pod-less series beside it (4.5.3-4.8.2 transformation/kubernetes.go:271-279, :366; the GPU operator's
    DaemonSet without a token or host PIDs maps none, R1): a pod reading 0 on a GPU that is 95% busy by its own
    series does not raise GpuAllocatedIdle. With the mapping working, an idle pod sharing a busy GPU with a
    busy pod (time-slicing) still does, and so does a pod on an idle GPU next to the broken one."""
    llm = 'namespace="team-llm"'
    degenerate = _case(
        {
            f'{m.GPU_UTIL}{{{GPU0},{llm},pod="train-0"}}': "0x60",  # its pod_uid="" is no label
            f"{m.GPU_UTIL}{{{GPU0}}}": "95x60",  # the GPU's own series: busy
            f'{m.GPU_UTIL}{{{GPU1},{llm},pod="idle-0"}}': "0x60",
            f"{m.GPU_UTIL}{{{GPU1}}}": "0x60",  # idle for real
        },
        [
            (
                "40m",
                "GpuAllocatedIdle",
                [
                    _alert(
                        "GpuAllocatedIdle",
                        "Pod idle-0 of team llm-training holds GPU 1 on gpu-1 below 5% utilisation for 30m.",
                        team="llm-training",
                        namespace="team-llm",
                        pod="idle-0",
                        **{"Hostname": "gpu-1", "gpu": "1", "UUID": "GPU-1"},
                    )
                ],
            )
        ],
    )
    sharing = _case(
        {
            f'{m.GPU_UTIL}{{{GPU0},{llm},pod="busy-0",pod_uid="u1",vgpu="0"}}': "90x60",
            f'{m.GPU_UTIL}{{{GPU0},{llm},pod="nb-0",pod_uid="u2",vgpu="1"}}': "0x60",
            f"{m.GPU_UTIL}{{{GPU0}}}": "90x60",
        },
        [
            (
                "40m",
                "GpuAllocatedIdle",
                [
                    _alert(
                        "GpuAllocatedIdle",
                        "Pod nb-0 of team llm-training holds GPU 0 on gpu-1 below 5% utilisation for 30m.",
                        team="llm-training",
                        namespace="team-llm",
                        pod="nb-0",
                        pod_uid="u2",
                        vgpu="1",
                        **{"Hostname": "gpu-1", "gpu": "0", "UUID": "GPU-0"},
                    )
                ],
            )
        ],
    )
    result = _run(promtool, rule_file, [degenerate, sharing], "gpufleet-idle-trust.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_recording_rules_count_whole_gpus(promtool: str, rule_file: Path) -> None:
    result = _run(promtool, rule_file, [_units_case()], "gpufleet-units.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails(promtool: str, rule_file: Path) -> None:
    """The harness can fail: an alert expected where the rule is silent, and a wrong recorded value."""
    wrong = _case(
        {f'{m.XID_COUNT}{{{GPU0},xid="13"}}': "1 1 1"},
        [("2m", "GpuHardwareXid", [_alert("GpuHardwareXid", "x", Hostname="gpu-1", gpu="0", UUID="GPU-0")])],
    )
    assert _run(promtool, rule_file, [wrong], "wrong.test.yaml").returncode != 0
    units = _units_case()
    units["promql_expr_test"][0]["exp_samples"][0]["value"] = 7.0  # the raw slice count
    assert _run(promtool, rule_file, [units], "wrong-units.test.yaml").returncode != 0


def test_runbook_links_are_absolute_urls_when_a_base_is_given() -> None:
    """Alertmanager and Grafana treat `runbook_url` as a link: a repository-relative path is not one."""
    base = "https://git.example.com/org/gpufleet/blob/main/docs/operations.md"
    with_base = alerts(ops_spec(runbookBaseUrl=base))
    assert all(r["annotations"]["runbook_url"] == f"{base}#{r['alert'].lower()}" for r in with_base)
    assert all("runbook_url" not in r["annotations"] for r in alerts(SPEC))
