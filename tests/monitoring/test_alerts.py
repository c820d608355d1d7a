"""Alert rules against the real tools: `promtool check rules`, `promtool test rules` (fire and stay silent), the
PrometheusRule CRD of the Prometheus operator (v0.93.0), and the metric names the exporters really publish."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.monitoring import metrics as m
from infra.monitoring.alerts import RUNBOOK, rule_groups
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
    """promtool parses each expression and template (Prometheus `promtool check rules`)."""
    result = run_promtool(promtool, "check", "rules", str(rule_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in RULES['groups'])} rules found" in result.stdout


def test_promtool_rejects_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    bad = {"groups": [{"name": "x", "rules": [{"alert": "X", "expr": "sum by (gpu DCGM_FI_DEV_GPU_UTIL"}]}]}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert run_promtool(promtool, "check", "rules", str(tmp_path / "bad.yaml")).returncode != 0


def test_rules_name_only_metrics_the_stack_exports() -> None:
    used = {name for g in RULES["groups"] for r in g["rules"] for name in metric_names(r["expr"])}
    assert used - m.EXPORTED == set()
    assert {m.XID, m.ECC_DBE_VOLATILE, m.ROW_REMAP_FAILURE, *m.NVLINK_ERRORS, m.THERMAL_VIOLATION} <= used
    assert {m.KUEUE_PENDING, m.KUEUE_USAGE, m.KUEUE_NOMINAL, m.NODE_CONDITION} <= used


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
    ours = _csv_fields(m.dcgm_counters_csv())
    assert {f: ours[f] for f in ours if upstream.get(f) != ours[f]} == {}
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


# ---- promtool test rules ------------------------------------------------------------------------------------

GPU0 = 'Hostname="gpu-1",gpu="0",UUID="GPU-0"'
GPU1 = 'Hostname="gpu-1",gpu="1",UUID="GPU-1"'


def _alert(name: str, summary: str, **labels: str) -> dict[str, Any]:
    rule = next(r for g in RULES["groups"] for r in g["rules"] if r["alert"] == name)
    return {
        "exp_labels": {**rule["labels"], **labels},
        "exp_annotations": {"summary": summary, "runbook_url": RUNBOOK + name.lower()},
    }


def _case(series: dict[str, str], checks: list[tuple[str, str, list[dict[str, Any]]]]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": exp} for t, a, exp in checks],
    }


def _tests() -> list[dict[str, Any]]:
    gpu = {"Hostname": "gpu-1", "gpu": "0", "UUID": "GPU-0"}
    gpu1 = {"Hostname": "gpu-1", "gpu": "1", "UUID": "GPU-1"}
    return [
        # XID 79 fires the fallen-off-bus alert, not the generic one; another XID the generic one only.
        _case(
            {f"{m.XID}{{{GPU0}}}": "0 0 79 79", f"{m.XID}{{{GPU1}}}": "0 0 13 13"},
            [
                ("1m", "GpuFallenOffBus", []),
                ("1m", "GpuXidError", []),
                (
                    "3m",
                    "GpuFallenOffBus",
                    [_alert("GpuFallenOffBus", "GPU 0 on gpu-1 has fallen off the bus (XID 79).", **gpu)],
                ),
                ("3m", "GpuXidError", [_alert("GpuXidError", "GPU 1 on gpu-1 reported XID 13.", **gpu1)]),
            ],
        ),
        # Double-bit ECC: a counter step fires; a flat counter (old errors) stays silent.
        _case(
            {f"{m.ECC_DBE_VOLATILE}{{{GPU0}}}": "2x5 3x5", f"{m.ECC_DBE_VOLATILE}{{{GPU1}}}": "7x10"},
            [
                ("4m", "GpuDoubleBitEccError", []),
                (
                    "7m",
                    "GpuDoubleBitEccError",
                    [_alert("GpuDoubleBitEccError", "GPU 0 on gpu-1 had double-bit ECC errors.", **gpu)],
                ),
            ],
        ),
        _case(
            {f"{m.ROW_REMAP_FAILURE}{{{GPU0}}}": "0 0 1", f"{m.ROW_REMAP_FAILURE}{{{GPU1}}}": "0 0 0"},
            [
                ("1m", "GpuRowRemapFailure", []),
                (
                    "2m",
                    "GpuRowRemapFailure",
                    [
                        _alert(
                            "GpuRowRemapFailure",
                            "GPU 0 on gpu-1 failed to remap a row or remapped an uncorrectable one.",
                            **gpu,
                        )
                    ],
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
        # A GPU pool node not ready for 5 minutes fires; a non-GPU node (no pool label) never does.
        _case(
            {
                f'{m.NODE_CONDITION}{{node="gpu-1",condition="Ready",status="true"}}': "1 1 0x10",
                f'{m.NODE_CONDITION}{{node="cpu-1",condition="Ready",status="true"}}': "1 1 0x10",
                f'{m.NODE_LABELS}{{node="gpu-1",{m.POOL_LABEL_METRIC}="h100-train"}}': "1x12",
                f'{m.NODE_LABELS}{{node="cpu-1"}}': "1x12",
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
                            condition="Ready",
                            status="true",
                            **{m.POOL_LABEL_METRIC: "h100-train"},
                        )
                    ],
                ),
            ],
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
        # Pending: inference (default 1h) waits with no admission; llm-training waits but keeps admitting.
        _case(
            {
                f'{m.KUEUE_PENDING}{{cluster_queue="inference",status="active"}}': "3x120",
                f'{m.KUEUE_ADMITTED_TOTAL}{{cluster_queue="inference",priority_class="production"}}': "5x120",
                f'{m.KUEUE_PENDING}{{cluster_queue="llm-training",status="active"}}': "2x120",
                f'{m.KUEUE_ADMITTED_TOTAL}{{cluster_queue="llm-training",priority_class="production"}}': "0+1x120",
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
        # Quota: research uses all 8 h100-train GPUs for 15m; inference uses 10 of 16 l40s.
        _case(
            {
                f'{m.KUEUE_USAGE}{{cluster_queue="research",flavor="h100-train",resource="nvidia.com/gpu",cohort="gpufleet"}}': "8x30",
                f'{m.KUEUE_NOMINAL}{{cluster_queue="research",flavor="h100-train",resource="nvidia.com/gpu",cohort="gpufleet"}}': "8x30",
                f'{m.KUEUE_USAGE}{{cluster_queue="inference",flavor="l40s-infer",resource="nvidia.com/gpu",cohort="gpufleet"}}': "10x30",
                f'{m.KUEUE_NOMINAL}{{cluster_queue="inference",flavor="l40s-infer",resource="nvidia.com/gpu",cohort="gpufleet"}}': "16x30",
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


def test_every_alert_fires_and_stays_silent_where_it_should(promtool: str, rule_file: Path) -> None:
    """`promtool test rules` evaluates the rules over synthetic series exactly as Prometheus would."""
    tests = _tests()
    covered = {c["alertname"] for t in tests for c in t["alert_rule_test"]}
    assert covered == {r["alert"] for g in RULES["groups"] for r in g["rules"]}
    spec_file = rule_file.parent / "gpufleet-rules.test.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {"rule_files": [rule_file.name], "evaluation_interval": "1m", "tests": tests}, sort_keys=False
        )
    )
    result = run_promtool(promtool, "test", "rules", spec_file.name, cwd=rule_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_wrong_expectation_fails(promtool: str, rule_file: Path) -> None:
    """The harness can fail: an alert expected where the rule is silent."""
    wrong = _case(
        {f"{m.XID}{{{GPU0}}}": "0 0 0"},
        [
            (
                "2m",
                "GpuFallenOffBus",
                [_alert("GpuFallenOffBus", "x", Hostname="gpu-1", gpu="0", UUID="GPU-0")],
            )
        ],
    )
    path = rule_file.parent / "wrong.test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [rule_file.name], "tests": [wrong]}))
    assert run_promtool(promtool, "test", "rules", path.name, cwd=rule_file.parent).returncode != 0
