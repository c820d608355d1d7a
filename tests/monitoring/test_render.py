"""`invoke render` writes the monitoring side beside the scheduling manifests, as users run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.monitoring.conftest import run_promtool


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_render_writes_rules_monitors_and_dashboards(tmp_path: Path, promtool: str) -> None:
    result = invoke("render", "--stack", "example-prod", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "monitoring"
    listed = yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]
    kinds = {yaml.safe_load((folder / name).read_text())["kind"] for name in listed}
    assert kinds == {"PrometheusRule", "ServiceMonitor", "ClusterRoleBinding"}
    checked = run_promtool(promtool, "check", "rules", str(folder / "rules/gpufleet-rules.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    boards = sorted(p.name for p in (folder / "dashboards").iterdir())
    assert boards == ["gpufleet-fleet.json", "gpufleet-pools.json", "gpufleet-teams.json"]
    assert all(json.loads((folder / "dashboards" / b).read_text())["panels"] for b in boards)
    assert (folder / "kube-prometheus-stack-values.yaml").exists()  # prometheus: install
    top = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())["resources"]
    assert not [name for name in top if name.startswith("monitoring")]  # applied on their own (CRDs needed)


def test_render_replaces_the_folder_and_follows_the_stack(tmp_path: Path) -> None:
    assert invoke("render", "--stack", "example-prod", "--out", str(tmp_path)).returncode == 0
    result = invoke("render", "--stack", "metal", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    # metal: no Prometheus, self-healing on: only NVSentinel's values remain.
    assert sorted(p.name for p in (tmp_path / "monitoring").iterdir()) == ["nvsentinel-values.yaml"]
    values = yaml.safe_load((tmp_path / "monitoring/nvsentinel-values.yaml").read_text())
    assert values["global"]["faultQuarantine"] == {"enabled": True}
    assert invoke("render", "--stack", "dev", "--out", str(tmp_path)).returncode == 0
    assert not (tmp_path / "monitoring").exists()
