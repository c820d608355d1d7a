"""The FragmentationAware extender to the Prometheus: the PodMonitor against the operator's CRD (v0.93.0) and
the scheduler pods the stack really compiles, and the placement records and alert on the real Prometheus 3.x
(`promtool test rules`), over series shaped as the extender's own /metrics renders them and as the operator's
PodMonitor labels them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from infra.monitoring import extender as ext
from infra.monitoring.alerts import rule_groups
from infra.monitoring.stack import monitoring_objects
from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from scheduler.compiler import compile
from scheduler.extender.app import call, make_app
from scheduler.extender.manifests import CONTAINER
from scheduler.labels import SECONDARY_SCHEDULER_NAME
from scheduler.validation import crd_problems, load_crd_schemas
from tests.conftest import ROOT
from tests.extender.test_metrics import NAMES, scrape, view_with_pods
from tests.extender.test_target import pod
from tests.monitoring.conftest import run_promtool


def stack(strategy: str = "FragmentationAware", prometheus: str = "install") -> ClusterSpec:
    config = yaml.safe_load((ROOT / "Pulumi.example-prod.yaml").read_text())["config"]
    config["gpufleet:cluster"]["monitoring"] = {"prometheus": prometheus}
    config["gpufleet:scheduling"]["placement"] = {"strategy": strategy}
    return parse_config(config, "extmetrics")


def scheduler_deployment(spec: ClusterSpec) -> dict[str, Any]:
    (deployment,) = [
        o
        for o in compile(*scheduler_inputs(spec))
        if o["kind"] == "Deployment" and o["metadata"]["name"] == SECONDARY_SCHEDULER_NAME
    ]
    return deployment


def sidecar(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == CONTAINER]
    return container


def test_the_pod_monitor_scrapes_the_named_port_of_the_compiled_scheduler_pods(shared_dir: Path) -> None:
    spec = stack()
    (monitor,) = [o for o in monitoring_objects(spec) if o["kind"] == "PodMonitor"]
    schemas = load_crd_schemas(shared_dir / "crds/prometheus-operator")
    assert crd_problems(monitor, schemas) == []
    deployment = scheduler_deployment(spec)
    kubernetes_validate.validate(deployment, spec.cluster.kubernetes_version, strict=True)
    template = deployment["spec"]["template"]
    assert monitor["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert "namespaceSelector" not in monitor["spec"]  # the operator looks in the monitor's own namespace
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    container = sidecar(deployment)
    (port,) = [p for p in container.get("ports", []) if p["name"] == endpoint["port"]]
    args = container["args"]
    assert int(args[args.index("--metrics-port") + 1]) == port["containerPort"]
    assert args[args.index("--port") + 1] != str(port["containerPort"])  # the verbs stay on loopback
    assert args[args.index("--host") + 1] == "127.0.0.1"
    # The chart's Prometheus selects monitors by the release label (infra.monitoring.stack).
    assert monitor["metadata"]["labels"]["release"] == spec.cluster.monitoring.release
    broken = {**monitor, "spec": {**monitor["spec"], "podMetricsEndpoints": [{"port": 8889}]}}
    assert crd_problems(broken, schemas)  # `port` is the Pod port's name, a string


@pytest.mark.parametrize(
    ("strategy", "prometheus"), [("MostAllocated", "install"), ("FragmentationAware", "none")]
)
def test_nothing_scrapes_what_is_not_there(strategy: str, prometheus: str) -> None:
    """No extender (MostAllocated), or no Prometheus operator: no monitor, no rules, no port on the pod network."""
    spec = stack(strategy, prometheus)
    assert [o for o in monitoring_objects(spec) if o["kind"] == "PodMonitor"] == []
    assert ext.RECORDED.isdisjoint(r.get("record") for g in rule_groups(spec) for r in g["rules"])
    if strategy == "FragmentationAware":
        container = sidecar(scheduler_deployment(spec))
        assert "ports" not in container and "--metrics-port" not in container["args"]


# ---- the records and the alert on Prometheus 3.x --------------------------------------------------------

# The labels the operator's PodMonitor gives each target (prometheus-operator v0.93.0 pkg/prometheus/
# promcfg.go, generatePodMonitorConfig: namespace, container, pod, job `<namespace>/<name>`, endpoint the port's
# name) and Prometheus its `instance` (the address scraped).
LEADER = "gpu-binpack-7d9f-a"
STANDBY = "gpu-binpack-7d9f-b"


def target(pod_name: str, ip: str) -> dict[str, str]:
    return {"job": ext.JOB, "namespace": "gpufleet-scheduler", "pod": pod_name, "container": CONTAINER,
            "endpoint": "metrics", "instance": f"{ip}:8889"}  # fmt: skip


def exposition() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The extender's real /metrics after one compared pod that FGD puts elsewhere (tests/extender/
    test_metrics.py's cluster): the sample names and labels the input series copy."""
    view = view_with_pods(shadow=True)
    call(make_app(view), "prioritize", {"Pod": pod("one", "1", gpus=1, pool="h100"), "NodeNames": NAMES})
    return scrape(make_app(view))


def series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_the_rules_read_the_series_the_extender_renders() -> None:
    rendered = {name for name, _ in exposition()}
    assert rendered >= ext.EXPORTED, ext.EXPORTED - rendered


def _cases() -> list[dict[str, Any]]:
    shown = exposition()
    pools = {dict(labels)["pool"] for name, labels in shown if name == ext.FRAGMENTED}
    assert pools == {"h100"}, pools
    leader, standby = target(LEADER, "10.0.0.5"), target(STANDBY, "10.0.0.6")
    day = 24 * 60
    busy = {
        # The leader compares 10 pods a minute all day, FGD disagreeing on one; the standby counts nothing.
        series(ext.COMPARED, leader): f"0+10x{day + 60}",
        series(ext.DISAGREEMENTS, leader): f"0+1x{day + 60}",
        series(ext.COMPARED, standby): f"0x{day + 60}",
        series(ext.DISAGREEMENTS, standby): f"0x{day + 60}",
        # Both replicas see the pool alike: 4 of its 16 unallocated GPUs are fragments. A pool with nothing
        # unallocated has no ratio.
        **{series(ext.FRAGMENTED, {**t, "pool": "h100"}): "4x30" for t in (leader, standby)},
        **{series(ext.UNALLOCATED, {**t, "pool": "h100"}): "16x30" for t in (leader, standby)},
        **{series(ext.FRAGMENTED, {**t, "pool": "a10g"}): "0x30" for t in (leader, standby)},
        **{series(ext.UNALLOCATED, {**t, "pool": "a10g"}): "0x30" for t in (leader, standby)},
        # The standby's sidecar stops answering at minute 6.
        series("up", leader): "1x40",
        series("up", standby): "1x5 0x35",
    }
    quiet = {series(ext.COMPARED, leader): "0x100", series(ext.DISAGREEMENTS, leader): "0x100"}
    alert = next(r for g in rule_groups(stack()) for r in g["rules"] if r.get("alert") == ext.DOWN_ALERT)
    fired = {
        "exp_labels": {**alert["labels"], **standby},
        "exp_annotations": {
            "summary": f"Prometheus cannot scrape the FragmentationAware extender of {STANDBY}: its placement "
            "figures are stale, and if that pod's scheduler leads, the packing profile places alone.",
            "runbook": f"docs/operations.md#{ext.DOWN_ALERT.lower()}",
        },
    }
    return [
        {
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in busy.items()],
            "promql_expr_test": [
                # Rounded: increase() extrapolates to the window's edges in floating point.
                {
                    "expr": f"round({ext.RECORD_COMPARED})",
                    "eval_time": "1d",
                    "exp_samples": [{"labels": "{}", "value": 14400}],
                },
                {
                    "expr": f"round({ext.RECORD_DISAGREEMENT}, 0.0001)",
                    "eval_time": "1d",
                    "exp_samples": [{"labels": "{}", "value": 0.1}],
                },
                {
                    "expr": ext.RECORD_FRAGMENTED,
                    "eval_time": "20m",
                    "exp_samples": [{"labels": f'{ext.RECORD_FRAGMENTED}{{pool="h100"}}', "value": 0.25}],
                },
            ],
            "alert_rule_test": [
                {"eval_time": "12m", "alertname": ext.DOWN_ALERT, "exp_alerts": []},
                {"eval_time": "20m", "alertname": ext.DOWN_ALERT, "exp_alerts": [fired]},
            ],
        },
        {
            # Nothing compared all day (no GPU pod, or every one had a single candidate): no ratio at all,
            # rather than a 0 that reads "FGD always agreed".
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in quiet.items()],
            "promql_expr_test": [
                {"expr": ext.RECORD_DISAGREEMENT, "eval_time": "90m", "exp_samples": []},
                {
                    "expr": ext.RECORD_COMPARED,
                    "eval_time": "90m",
                    "exp_samples": [{"labels": ext.RECORD_COMPARED, "value": 0}],
                },
            ],
        },
    ]


def test_the_placement_records_and_alert_on_prometheus_3(promtool: str, tmp_path: Path) -> None:
    spec = stack()
    groups = [g for g in rule_groups(spec) if g["name"] == "gpufleet.placement"]
    assert groups, "a FragmentationAware stack with monitoring has the placement group"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    check = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": _cases()}
    (tmp_path / "rules.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = run_promtool(promtool, "test", "rules", "rules.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
