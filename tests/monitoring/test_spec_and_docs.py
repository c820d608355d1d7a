"""The monitoring keys of the spec (errors name their key path) and docs/operations.md staying true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from infra.errors import ConfigError
from infra.monitoring.alerts import alerts
from infra.monitoring.runbook import RUNBOOK_DOC
from infra.stackfile import parse_config
from tests.conftest import ROOT
from tests.monitoring.conftest import ops_spec

DOC = ROOT / "docs" / "operations.md"


def _config(**monitoring: object) -> dict:
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    config["gpufleet:cluster"]["monitoring"] = monitoring
    return config


def test_booleans_keep_their_meaning() -> None:
    """`true` is "a Prometheus operator already runs" (on a cluster the stack does not create: aws refuses it)."""
    for value, mode in ((True, "existing"), (False, "none")):
        config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
        config["gpufleet:cluster"]["monitoring"] = value
        mon = parse_config(config, "metal").cluster.monitoring
        assert mon.prometheus == mode and mon.enabled is (mode != "none")


@pytest.mark.parametrize(
    ("monitoring", "path"),
    [
        ({"prometheus": "always"}, "gpufleet:cluster.monitoring.prometheus"),
        ({"prometheus": "install", "idleAfter": "2 hours"}, "gpufleet:cluster.monitoring.idleAfter"),
        ({"prometheus": "install", "selfHealing": "reboot"}, "gpufleet:cluster.monitoring.selfHealing"),
        ({"grafana": True}, "gpufleet:cluster.monitoring.grafana"),
        ({"reclaimIdle": True}, "gpufleet:cluster.monitoring.reclaimIdle"),
        ({"prometheus": "install", "relase": "x"}, "gpufleet:cluster.monitoring.relase"),
        ({"prometheus": "install", "storage": {"size": "50GB"}}, "gpufleet:cluster.monitoring.storage.size"),
        ({"prometheus": "install", "retentionSize": "40Gi"}, "gpufleet:cluster.monitoring.retentionSize"),
        (
            {"prometheus": "install", "runbookBaseUrl": "docs/x.md"},
            "gpufleet:cluster.monitoring.runbookBaseUrl",
        ),
        (
            {"prometheus": "install", "alertmanager": {"routes": {"critical": "pager"}}},
            "gpufleet:cluster.monitoring.alertmanager",
        ),
        (
            {"prometheus": "install", "alertmanager": {"receivers": [{"name": "x"}]}},
            "gpufleet:cluster.monitoring.alertmanager.receivers[0]",
        ),
        (
            {
                "prometheus": "install",
                "alertmanager": {"receivers": [{"name": "x", "slack": {"webhookUrl": "https://hooks"}}]},
            },
            "gpufleet:cluster.monitoring.alertmanager.receivers[0].slack.webhookUrl",
        ),
        (
            {"prometheus": "install", "alertmanager": {"routes": {"urgent": "x"}}},
            "gpufleet:cluster.monitoring.alertmanager.routes.urgent",
        ),
        ({"prometheus": "existing", "alertmanager": {}}, "gpufleet:cluster.monitoring"),
    ],
)
def test_bad_monitoring_names_its_key(monitoring: dict, path: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(path)):
        parse_config(_config(**monitoring), "dev")


def test_an_unknown_receiver_in_a_route_is_named() -> None:
    with pytest.raises(ConfigError, match=r"routes\.critical: no receiver named 'pager'"):
        parse_config(_config(prometheus="install", alertmanager={"routes": {"critical": "pager"}}), "dev")


def test_a_bad_stack_file_exits_2(tmp_path: Path) -> None:
    """Through the task runner, as a user meets it: exit 2 and the key named, no traceback."""
    import subprocess
    import sys

    config = _config(prometheus="install", storage={"size": "lots"})
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump({"config": config}))
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "render", "--stack", str(stack)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "monitoring.storage.size" in result.stderr and "Traceback" not in result.stderr


def test_retention_size_defaults_to_most_of_the_volume() -> None:
    """Prometheus' retention size units are powers of two (GB = 2^30 bytes), like the volume's Gi."""
    assert ops_spec().cluster.monitoring.retention_bytes == "42GB"  # 85% of 50Gi
    assert ops_spec(storage={"size": "1Ti"}).cluster.monitoring.retention_bytes == "870GB"
    assert ops_spec(retentionSize="30GB").cluster.monitoring.retention_bytes == "30GB"


def test_a_teams_threshold_wins_over_the_default() -> None:
    rules = {(r["alert"], r["labels"].get("team")): r["for"] for r in alerts(ops_spec())}
    assert rules[("GpuAllocatedIdle", "llm-training")] == "30m"  # its own idleAfter
    assert rules[("GpuAllocatedIdle", "research")] == "2h"  # the monitoring default
    assert rules[("GpuWorkloadsPendingTooLong", "research")] == "2h"
    assert rules[("GpuWorkloadsPendingTooLong", "inference")] == "1h"


def _doc_blocks(marker: str) -> list[str]:
    return [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S) if marker in b]


def test_the_docs_example_stack_is_valid() -> None:
    (block,) = _doc_blocks("idleAfter: 2h")
    example = yaml.safe_load(block)["config"]
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    config["gpufleet:cluster"]["monitoring"] = example["gpufleet:cluster"]["monitoring"]
    config["gpufleet:teams"] = example["gpufleet:teams"]
    spec = parse_config(config, "dev")
    assert spec.cluster.monitoring.prometheus == "install" and spec.teams[0].idle_after == "30m"


def test_the_docs_alertmanager_example_is_valid_and_routes_every_severity() -> None:
    from infra.monitoring.stack import alertmanager_config, alertmanager_secrets

    (block,) = _doc_blocks("alertmanager:")
    monitoring = yaml.safe_load(block)["config"]["gpufleet:cluster"]["monitoring"]
    spec = parse_config(_config(**monitoring), "dev")
    mon = spec.cluster.monitoring
    config = alertmanager_config(mon)
    assert config is not None
    kinds = {k for r in config["receivers"] for k in r if k.endswith("_configs")}
    assert kinds == {"slack_configs", "pagerduty_configs", "email_configs"}
    routed = {m["matchers"][0] for m in config["route"]["routes"]}
    assert {f'severity = "{s}"' for s in ("critical", "warning", "info")} <= routed
    assert alertmanager_secrets(mon)


def test_every_alert_has_a_runbook_section() -> None:
    text = DOC.read_text()
    headings = {h.strip().lower() for h in re.findall(r"^### (\w+)$", text, flags=re.M)}
    from tests.monitoring.test_extender_monitoring import stack

    for rule in alerts(ops_spec()) + alerts(stack("FragmentationAware")):  # the extender's alert too
        assert rule["alert"].lower() in headings
        assert rule["annotations"]["runbook"] == f"{RUNBOOK_DOC}#{rule['alert'].lower()}"
    assert (ROOT / RUNBOOK_DOC).is_file()


def test_usage_examples_stay_within_the_default_retention() -> None:
    """A `--since` longer than Prometheus keeps samples reports a cut window: the docs' examples fit the
    default retention."""
    from infra.monitoring.usage import parse_window

    default = ops_spec().cluster.monitoring.retention
    windows = re.findall(r"invoke usage [^\n]*--since (\w+)", DOC.read_text())
    assert windows
    assert all(parse_window(w) <= parse_window(default) for w in windows), (windows, default)
