"""The monitoring keys of the spec (errors name their key path) and docs/operations.md staying true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from infra.errors import ConfigError
from infra.monitoring.alerts import RUNBOOK, rule_groups
from infra.stackfile import parse_config
from tests.conftest import ROOT
from tests.monitoring.conftest import ops_spec

DOC = ROOT / "docs" / "operations.md"


def _config(**monitoring: object) -> dict:
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    config["gpufleet:cluster"]["monitoring"] = monitoring
    return config


def test_booleans_keep_their_meaning() -> None:
    for value, mode in ((True, "existing"), (False, "none")):
        config = _config()
        config["gpufleet:cluster"]["monitoring"] = value
        mon = parse_config(config, "dev").cluster.monitoring
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
    ],
)
def test_bad_monitoring_names_its_key(monitoring: dict, path: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(path)):
        parse_config(_config(**monitoring), "dev")


def test_a_teams_threshold_wins_over_the_default() -> None:
    rules = {
        (r["alert"], r["labels"].get("team")): r["for"] for g in rule_groups(ops_spec()) for r in g["rules"]
    }
    assert rules[("GpuAllocatedIdle", "llm-training")] == "30m"  # its own idleAfter
    assert rules[("GpuAllocatedIdle", "research")] == "2h"  # the monitoring default
    assert rules[("GpuWorkloadsPendingTooLong", "research")] == "2h"
    assert rules[("GpuWorkloadsPendingTooLong", "inference")] == "1h"


def test_the_docs_example_stack_is_valid() -> None:
    (block,) = [
        b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S) if "monitoring:" in b
    ]
    example = yaml.safe_load(block)["config"]
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    config["gpufleet:cluster"]["monitoring"] = example["gpufleet:cluster"]["monitoring"]
    config["gpufleet:teams"] = example["gpufleet:teams"]
    spec = parse_config(config, "dev")
    assert spec.cluster.monitoring.prometheus == "install" and spec.teams[0].idle_after == "30m"


def test_every_alert_has_a_runbook_section() -> None:
    text = DOC.read_text()
    headings = {h.strip().lower() for h in re.findall(r"^### (\w+)$", text, flags=re.M)}
    for group in rule_groups(ops_spec()):
        for rule in group["rules"]:
            assert rule["alert"].lower() in headings
            assert rule["annotations"]["runbook_url"] == RUNBOOK + rule["alert"].lower()
    assert Path(ROOT / RUNBOOK.split("#")[0]).is_file()
