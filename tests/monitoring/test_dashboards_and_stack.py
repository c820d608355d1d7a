"""Dashboards, chart values and monitors against their real references: promtool parses every panel query,
kube-prometheus-stack 88.5.3's values.yaml has every key we set, the Prometheus operator CRDs (v0.93.0) accept
every monitor, and every gpufleet monitor and rule carries the label the chart's Prometheus selects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.gpu_stack.gpu_operator import gpu_operator_values
from infra.monitoring import metrics as m
from infra.monitoring.dashboards import dashboards, expressions
from infra.monitoring.stack import (
    ALERTMANAGER_SECRETS_DIR,
    EKS_UNREACHABLE_MONITORS,
    alertmanager_config,
    dashboard_configmaps,
    kube_prometheus_stack_values,
    monitoring_objects,
    prometheus_service_account,
    workload_state_metrics,
)
from scheduler.validation import core_problems, crd_problems, load_crd_schemas
from tests.conftest import ROOT
from tests.infra.clusterpolicy import missing_keys
from tests.monitoring.conftest import ops_spec, run_promtool
from tests.monitoring.test_alerts import metric_names
from tests.support import require

SPEC = ops_spec()
KPS = "crds/prometheus-operator/kube-prometheus-stack"
# kube-state-metrics chart 8.4.0 (the kube-prometheus-stack 88.5.3 dependency), values.yaml at the tag
# kube-state-metrics-8.4.0 (prometheus-community/helm-charts): `metricLabelsAllowlist: []` (passed as
# --metric-labels-allowlist), `nodeSelector: {}`, `customResourceState: {enabled, create, name, key, config}`
# (the chart writes `config` to a ConfigMap and passes --custom-resource-state-config-file) and
# `rbac.extraRules: []` (appended to its ClusterRole).
KSM_CHART_KEYS = {
    "metricLabelsAllowlist": None,
    "nodeSelector": None,
    "customResourceState": {"enabled", "create", "name", "key", "config"},
    "rbac": {"create", "customResourceState", "useClusterRole", "extraRules"},
}


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
    assert exprs
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = run_promtool(promtool, "check", "rules", str(tmp_path / "panels.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_panels_name_only_exported_metrics_and_cover_usage_queues_nodes_and_cost() -> None:
    boards = dashboards(SPEC)
    used = {n for b in boards.values() for e in expressions(b) for n in metric_names(e)}
    assert used - m.EXPORTED - m.RECORDED == set()
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


def _ksm_keys_missing(subchart: dict[str, Any]) -> list[str]:
    missing = [k for k in subchart if k not in KSM_CHART_KEYS]
    for key, inner in KSM_CHART_KEYS.items():
        if inner is not None and key in subchart:
            missing += [f"{key}.{k}" for k in subchart[key] if k not in inner]
    return missing


def test_chart_values_use_only_keys_of_the_pinned_chart(kps_values: dict[str, Any]) -> None:
    """Every key we set exists in kube-prometheus-stack 88.5.3's values.yaml, on both platforms and with every
    optional input (persistent volume, Alertmanager receivers)."""
    for spec in (SPEC, ops_spec(alertmanager=ALERTMANAGER), _metal_spec()):
        values = kube_prometheus_stack_values(spec)
        subchart = values.pop("kube-state-metrics")
        assert missing_keys(values, kps_values) == []
        assert _ksm_keys_missing(subchart) == []
    assert missing_keys({"prometheus": {"prometheusSpec": {"retentionn": "1d"}}}, kps_values)
    assert _ksm_keys_missing({"customResourceState": {"enable": True}}) == ["customResourceState.enable"]


def _metal_spec() -> Any:
    from infra.stackfile import parse_config
    from tests.conftest import ROOT

    config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    assert config["gpufleet:platform"] == "existing"
    config["gpufleet:cluster"]["monitoring"] = {"prometheus": "install"}
    return parse_config(config, "metal")


ALERTMANAGER = {
    "receivers": [
        {"name": "pager", "pagerduty": {"routingKey": {"secret": "alert-keys", "key": "pagerduty"}}},
        {
            "name": "chat",
            "slack": {"webhookUrl": {"secret": "alert-keys", "key": "slack"}, "channel": "#gpu-alerts"},
        },
        {
            "name": "mail",
            "email": {
                "to": "gpu-oncall@example.com",
                "fromAddress": "alertmanager@example.com",
                "smarthost": "smtp.example.com:587",
                "username": "alertmanager",
                "password": {"secret": "smtp", "key": "password"},
            },
        },
    ],
    "routes": {"critical": "pager", "warning": "chat"},
    "default": "mail",
}


def test_prometheus_keeps_its_data_on_a_persistent_volume(kps_values: dict[str, Any]) -> None:
    """The chart's default `storageSpec: {}` is an emptyDir: every restart would wipe the usage history."""
    assert kps_values["prometheus"]["prometheusSpec"]["storageSpec"] == {}
    prom = kube_prometheus_stack_values(ops_spec(storage={"size": "200Gi", "storageClass": "gp3"}))[
        "prometheus"
    ]["prometheusSpec"]
    claim = prom["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["resources"]["requests"]["storage"] == "200Gi" and claim["storageClassName"] == "gp3"
    assert prom["retentionSize"] == "170GB"
    default = kube_prometheus_stack_values(SPEC)["prometheus"]["prometheusSpec"]
    assert "storageClassName" not in default["storageSpec"]["volumeClaimTemplate"]["spec"]


def test_alertmanager_secrets_stay_in_mounted_files(kps_values: dict[str, Any]) -> None:
    """Alertmanager v0.34 reads `api_url_file`, `routing_key_file` and `auth_password_file`. Each receiver
    Secret is mounted at /etc/alertmanager/secrets/<name> (where `alertmanagerSpec.secrets` would put it) as an
    optional Secret volume: the operator mounts `secrets` as required ones (pkg/alertmanager/statefulset.go at
    v0.93.0), and a Secret not created yet would hold the pod in ContainerCreating. The values carry paths,
    never the secret values; without `monitoring.alertmanager` the chart's own config is kept."""
    assert kps_values["alertmanager"]["alertmanagerSpec"]["secrets"] == []
    values = kube_prometheus_stack_values(ops_spec(alertmanager=ALERTMANAGER))["alertmanager"]
    am_spec = values["alertmanagerSpec"]
    assert "secrets" not in am_spec
    volumes = {v["name"]: v["secret"] for v in am_spec["volumes"]}
    assert sorted(s["secretName"] for s in volumes.values()) == ["alert-keys", "smtp"]
    assert all(s["optional"] is True for s in volumes.values())
    mounts = {m["mountPath"]: m["name"] for m in am_spec["volumeMounts"]}
    assert {p: volumes[v]["secretName"] for p, v in mounts.items()} == {
        f"{ALERTMANAGER_SECRETS_DIR}/alert-keys": "alert-keys",
        f"{ALERTMANAGER_SECRETS_DIR}/smtp": "smtp",
    }
    by_name = {r["name"]: r for r in values["config"]["receivers"]}
    assert (
        by_name["chat"]["slack_configs"][0]["api_url_file"] == f"{ALERTMANAGER_SECRETS_DIR}/alert-keys/slack"
    )
    assert by_name["pager"]["pagerduty_configs"][0]["routing_key_file"].endswith("/alert-keys/pagerduty")
    assert by_name["mail"]["email_configs"][0]["auth_password_file"].endswith("/smtp/password")
    assert values["config"]["route"]["receiver"] == "mail"
    assert "config" not in kube_prometheus_stack_values(SPEC)["alertmanager"]


@pytest.mark.toolchain
def test_the_alertmanager_config_loads_in_alertmanager(tmp_path: Path) -> None:
    """The generated configuration starts the toolchain's Alertmanager v0.34.0 (the chart's version), which
    refuses a configuration it cannot parse; the harness proves a broken one is refused."""
    import shutil
    import socket
    import subprocess
    import time

    from infra.versions import TWIN_ALERTMANAGER
    from twin.toolchain.build import program

    binary = program(TWIN_ALERTMANAGER, "alertmanager")
    if binary is None:
        require("alertmanager v0.34.0 from the toolchain is needed: invoke twin-build")

    def starts(config: dict[str, Any], name: str) -> tuple[bool, str]:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "am.yml").write_text(yaml.safe_dump(config))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={folder / 'am.yml'}",
                f"--storage.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        return True, ""
                except OSError:
                    time.sleep(0.2)
            return False, proc.stdout.read() if proc.stdout and proc.poll() is not None else ""
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
            shutil.rmtree(folder / "data", ignore_errors=True)

    config = alertmanager_config(ops_spec(alertmanager=ALERTMANAGER).cluster.monitoring)
    assert config is not None
    ok, log = starts(config, "good")
    assert ok, log
    broken = {**config, "route": {**config["route"], "receiver": "nobody"}}
    assert starts(broken, "broken")[0] is False


def test_eks_turns_off_the_control_plane_monitors(kps_values: dict[str, Any]) -> None:
    """kube-prometheus-stack 88.5.3 enables the kubeControllerManager, kubeEtcd, kubeScheduler and kubeProxy
    monitors; EKS gives them no targets, so their down alerts would fire for ever."""
    assert all(kps_values[name]["enabled"] is True for name in EKS_UNREACHABLE_MONITORS)
    values = kube_prometheus_stack_values(SPEC)
    assert SPEC.platform == "aws"
    assert all(values[name] == {"enabled": False} for name in EKS_UNREACHABLE_MONITORS)
    assert not set(EKS_UNREACHABLE_MONITORS) & set(kube_prometheus_stack_values(_metal_spec()))


def test_the_workload_metrics_config_follows_kube_state_metrics_format() -> None:
    """kube-state-metrics v2.20.0 customresourcestate-metrics.md: `kind: CustomResourceStateMetrics`,
    `spec.resources[].{groupVersionKind, metricNamePrefix, labelsFromPath, metrics[].each}`, gauge
    `path`/`valueFrom`/`labelsFromPath`; a metric is named `<metricNamePrefix>_<name>`. Kueue v0.19.2 serves
    Workload as kueue.x-k8s.io/v1beta2 (its CRD) with `spec.queueName` and the `QuotaReserved` condition."""
    crd = yaml.safe_load(
        (
            Path(__import__("os").environ["GPUFLEET_SHARED"]) / "crds/kueue/kueue.x-k8s.io_workloads.yaml"
        ).read_text()
    )
    config = workload_state_metrics()
    assert config["kind"] == "CustomResourceStateMetrics"
    (resource,) = config["spec"]["resources"]
    gvk = resource["groupVersionKind"]
    assert (gvk["group"], gvk["kind"]) == (crd["spec"]["group"], crd["spec"]["names"]["kind"])
    version = next(v for v in crd["spec"]["versions"] if v["name"] == gvk["version"])
    assert version["served"] and version["storage"]
    assert "queueName" in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    names = {f"{resource['metricNamePrefix']}_{metric['name']}" for metric in resource["metrics"]}
    assert names == {m.WORKLOAD_CREATED, m.WORKLOAD_CONDITION}
    ksm = kube_prometheus_stack_values(SPEC)["kube-state-metrics"]
    assert ksm["customResourceState"] == {"enabled": True, "config": config}
    assert {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list", "watch"]} in ksm[
        "rbac"
    ]["extraRules"]


def test_chart_values_follow_the_spec() -> None:
    values = kube_prometheus_stack_values(ops_spec(retention="30d", grafana=False))
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "30d" and spec["nodeSelector"] == {"gpufleet.io/role": "system"}
    assert values["grafana"]["enabled"] is False
    assert values["kube-state-metrics"]["metricLabelsAllowlist"] == [
        "nodes=[gpufleet.io/pool,nvidia.com/gpu.deploy.operands]"
    ]


def test_prometheus_volume_claims_are_deleted_with_the_statefulset(kps_values: dict[str, Any]) -> None:
    """kube-prometheus-stack 88.5.3 leaves `prometheusSpec.persistentVolumeClaimRetentionPolicy: {}`, so the
    StatefulSet's default (Retain) would keep Prometheus' PVC, and its volume, after a destroy. The key is one
    of the chart's."""
    for spec in (SPEC, _metal_spec()):
        prometheus = kube_prometheus_stack_values(spec)["prometheus"]["prometheusSpec"]
        assert prometheus["persistentVolumeClaimRetentionPolicy"] == {
            "whenDeleted": "Delete",
            "whenScaled": "Retain",
        }
    assert kps_values["prometheus"]["prometheusSpec"]["persistentVolumeClaimRetentionPolicy"] == {}


def test_pool_panels_count_whole_gpus() -> None:
    """Allocated and cost panels read the whole-GPU recording rule, never Kueue's raw units (a MIG slice or a
    time-sliced replica is a fraction of a GPU)."""
    boards = dashboards(SPEC)
    exprs = [e for b in boards.values() for e in expressions(b)]
    assert not [e for e in exprs if m.KUEUE_USAGE in e or m.KUEUE_NOMINAL in e]
    assert any(m.RECORD_ALLOCATED in e for e in expressions(boards["gpufleet-pools.json"]))


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
        # `existing` only where the stack does not create the cluster (aws refuses it: infra.rules)
        spec = ops_spec(prometheus=mode, release="prom") if mode == "install" else metal_spec(release="prom")
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
    from infra.aws.addons.cluster_autoscaler import cluster_autoscaler_values

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


def test_the_node_labels_are_named_as_kube_state_metrics_names_them() -> None:
    """kube-state-metrics exports an allow-listed node label `k` as `label_<k>` with every character outside
    [a-zA-Z0-9_] replaced by `_` (its docs, "metric-labels-allowlist"); resource names likewise
    (`nvidia.com/gpu` -> `nvidia_com_gpu`). The pool and the GPU operator's operands label are both allowed."""
    import re

    from scheduler.labels import GPU_OPERANDS_LABEL, GPU_RESOURCE, POOL_LABEL

    assert "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", POOL_LABEL) == m.POOL_LABEL_METRIC
    assert "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", GPU_OPERANDS_LABEL) == m.OPERANDS_LABEL_METRIC
    assert re.sub(r"[^a-zA-Z0-9_]", "_", GPU_RESOURCE) == m.GPU_RESOURCE_METRIC
    allow = kube_prometheus_stack_values(SPEC)["kube-state-metrics"]["metricLabelsAllowlist"]
    assert allow == [f"nodes=[{POOL_LABEL},{GPU_OPERANDS_LABEL}]"]


def metal_spec(**monitoring: Any) -> Any:  # ClusterSpec
    """The metal stack (an existing cluster) adopting a running kube-prometheus-stack."""
    from infra.stackfile import parse_config

    config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    config["gpufleet:cluster"]["monitoring"] = {"prometheus": "existing", **monitoring}
    return parse_config(config, "ops-metal")
