"""Dashboards, chart values and monitors against their real references: promtool parses every panel query,
kube-prometheus-stack 88.5.3's values.yaml has every key we set, the Prometheus operator CRDs (v0.93.0) accept
every monitor, and every gpufleet monitor and rule carries the label the chart's Prometheus selects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.addons.gpu_operator import gpu_operator_values
from infra.monitoring import metrics as m
from infra.monitoring.dashboards import dashboards, expressions
from infra.monitoring.stack import (
    dashboard_configmaps,
    kube_prometheus_stack_values,
    monitoring_objects,
    prometheus_service_account,
)
from scheduler.validation import core_problems, crd_problems, load_crd_schemas
from tests.infra.clusterpolicy import missing_keys
from tests.monitoring.conftest import ops_spec, run_promtool
from tests.monitoring.test_alerts import metric_names

SPEC = ops_spec()
KPS = "crds/prometheus-operator/kube-prometheus-stack"
# kube-state-metrics chart 8.4.0 (the kube-prometheus-stack 88.5.3 dependency), values.yaml at the tag
# kube-state-metrics-8.4.0: `metricLabelsAllowlist: []` (passed as --metric-labels-allowlist) and `nodeSelector: {}`.
KSM_CHART_KEYS = {"metricLabelsAllowlist", "nodeSelector"}


@pytest.fixture(scope="module")
def kps_values(shared_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((shared_dir / KPS / "values.yaml").read_text())


@pytest.fixture(scope="module")
def schemas(shared_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return load_crd_schemas(shared_dir / "crds/prometheus-operator")


def test_every_panel_query_parses(promtool: str, tmp_path: Path) -> None:
    """promtool has no bare "parse this query" command, so each panel query becomes a recording rule and
    `promtool check rules` parses it exactly as Prometheus would."""
    exprs = [e for board in dashboards(SPEC).values() for e in expressions(board)]
    rules = [{"record": f"gpufleet:panel_{i}", "expr": e} for i, e in enumerate(exprs)]
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = run_promtool(promtool, "check", "rules", str(tmp_path / "panels.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_panels_name_only_exported_metrics_and_cover_the_issue() -> None:
    boards = dashboards(SPEC)
    used = {n for b in boards.values() for e in expressions(b) for n in metric_names(e)}
    assert used - m.EXPORTED == set()
    titles = {p["title"] for b in boards.values() for p in b["panels"]}
    for wanted in (
        "GPU utilisation",
        "allocated (Kueue) vs quota",
        "used",
        "Idle GPU-hours",
        "Queue wait",
        "Nodes per pool",
        "cost",
    ):
        assert any(wanted in t for t in titles), wanted
    assert len({b["uid"] for b in boards.values()}) == 3


def test_pool_cost_uses_the_catalog_price_per_gpu() -> None:
    """p5.48xlarge: 55.04 USD/h for 8 GPUs -> 6.88 per GPU-hour (infra.catalog)."""
    (cost,) = [p for p in dashboards(SPEC)["gpufleet-pools.json"]["panels"] if "cost" in p["title"]]
    h100 = next(t for t in cost["targets"] if t["legendFormat"] == "h100-train")
    assert h100["expr"].endswith("* 6.88")


def test_dashboards_reach_the_grafana_sidecar(kps_values: dict[str, Any]) -> None:
    """The chart's sidecar loads ConfigMaps labelled grafana_dashboard=1 from every namespace (values.yaml)."""
    sidecar = kps_values["grafana"]["sidecar"]["dashboards"]
    for cm in dashboard_configmaps(SPEC):
        assert cm["metadata"]["labels"][sidecar["label"]] == sidecar["labelValue"]
        assert core_problems(cm, SPEC.cluster.kubernetes_version) == []
        (body,) = cm["data"].values()
        assert json.loads(body)["panels"]


def test_chart_values_use_only_keys_of_the_pinned_chart(kps_values: dict[str, Any]) -> None:
    values = kube_prometheus_stack_values(SPEC)
    subchart = values.pop("kube-state-metrics")
    assert missing_keys(values, kps_values) == []
    assert set(subchart) <= KSM_CHART_KEYS
    assert missing_keys({"prometheus": {"prometheusSpec": {"retentionn": "1d"}}}, kps_values)


def test_chart_values_follow_the_spec() -> None:
    values = kube_prometheus_stack_values(ops_spec(retention="30d", grafana=False))
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "30d" and spec["nodeSelector"] == {"gpufleet.io/role": "system"}
    assert values["grafana"]["enabled"] is False
    assert values["kube-state-metrics"]["metricLabelsAllowlist"] == ["nodes=[gpufleet.io/pool]"]


def test_every_monitor_and_rule_is_selected_by_the_charts_prometheus(
    kps_values: dict[str, Any], schemas: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """kube-prometheus-stack selects only objects labelled `release: <release name>` while the
    `*SelectorNilUsesHelmValues` values are true (their default, which we keep)."""
    prom = kps_values["prometheus"]["prometheusSpec"]
    assert prom["ruleSelectorNilUsesHelmValues"] and prom["serviceMonitorSelectorNilUsesHelmValues"]
    assert (
        prom["serviceMonitorNamespaceSelector"] == {}
    )  # monitors in any namespace (gpu-operator, kueue-system)
    # The Kueue monitor reads its token from a file, as the Kueue chart's own monitor does: allowed unless
    # arbitraryFSAccessThroughSMs is turned on, which the chart leaves off.
    assert prom["arbitraryFSAccessThroughSMs"] is False
    for mode in ("install", "existing"):
        spec = ops_spec(prometheus=mode, release="prom")
        objects = monitoring_objects(spec)
        crs = [o for o in objects if o["apiVersion"] == "monitoring.coreos.com/v1"]
        assert {o["kind"] for o in crs} == {"PrometheusRule", "ServiceMonitor"}
        (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
        assert binding["subjects"][0]["name"] == "prom-kube-prometheus-stack-prometheus"
        for obj in crs:
            assert obj["metadata"]["labels"]["release"] == "prom"
            assert crd_problems(obj, schemas) == []
        dcgm = gpu_operator_values(spec)["dcgmExporter"]["serviceMonitor"]
        assert dcgm["enabled"] and dcgm["additionalLabels"] == {"release": "prom"}
    assert monitoring_objects(ops_spec(prometheus="none", grafana=False)) == []


def test_kueue_metrics_reader_binding_names_the_charts_prometheus_account() -> None:
    """`<fullname>-prometheus`, fullname = release if it contains the chart name (chart _helpers.tpl)."""
    assert prometheus_service_account(ops_spec()) == "kube-prometheus-stack-prometheus"
    assert prometheus_service_account(ops_spec(release="prom")) == "prom-kube-prometheus-stack-prometheus"
    assert (
        prometheus_service_account(ops_spec(release="metrics-main"))
        == "metrics-main-kube-promethe-prometheus"
    )
    (binding,) = [o for o in monitoring_objects(ops_spec()) if o["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "kueue-metrics-reader"
    assert core_problems(binding, SPEC.cluster.kubernetes_version) == []


def test_the_autoscaler_chart_creates_a_monitor_the_prometheus_selects() -> None:
    """cluster-autoscaler chart values.yaml: `serviceMonitor.{enabled, interval, namespace, selector, path}`,
    the `selector` map being the labels put on the ServiceMonitor (default `release: prometheus-operator`)."""
    from infra.addons.cluster_autoscaler import cluster_autoscaler_values

    monitor = cluster_autoscaler_values(ops_spec(release="prom"), "arn")["serviceMonitor"]
    assert set(monitor) <= {"enabled", "interval", "namespace", "selector", "path", "annotations"}
    assert monitor["enabled"] and monitor["selector"] == {"release": "prom"}
    assert "serviceMonitor" not in cluster_autoscaler_values(
        ops_spec(prometheus="none", grafana=False), "arn"
    )


def test_karpenters_monitor_values_exist_in_its_chart(shared_dir: Path) -> None:
    """Karpenter v1.14.1 chart values.yaml: `serviceMonitor.enabled`, `serviceMonitor.additionalLabels`."""
    from infra.monitoring.stack import karpenter_service_monitor_values

    chart = yaml.safe_load((shared_dir / "crds/karpenter/chart/values.yaml").read_text())
    values = {"serviceMonitor": karpenter_service_monitor_values(ops_spec(release="prom"))}
    assert missing_keys(values, chart) == []
    assert values["serviceMonitor"]["additionalLabels"] == {"release": "prom"}


def test_the_pool_label_is_named_as_kube_state_metrics_names_it() -> None:
    """kube-state-metrics exports an allow-listed node label `k` as `label_<k>` with every character outside
    [a-zA-Z0-9_] replaced by `_` (its docs, "metric-labels-allowlist"); resource names likewise
    (`nvidia.com/gpu` -> `nvidia_com_gpu`)."""
    import re

    from scheduler.labels import GPU_RESOURCE, POOL_LABEL

    assert "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", POOL_LABEL) == m.POOL_LABEL_METRIC
    assert re.sub(r"[^a-zA-Z0-9_]", "_", GPU_RESOURCE) == m.GPU_RESOURCE_METRIC
    allow = kube_prometheus_stack_values(SPEC)["kube-state-metrics"]["metricLabelsAllowlist"]
    assert allow == [f"nodes=[{POOL_LABEL}]"]
