"""Existing clusters: nothing to check on AWS, only that the kubeconfig the stack names is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.preflight.helpers import run_task, stack_doc, write_stack


def metal_stack(tmp_path: Path, kubeconfig: Path) -> Path:
    doc = stack_doc("metal")
    doc["config"]["gpufleet:cluster"]["kubeconfig"] = str(kubeconfig)
    return write_stack(tmp_path, "metal-test", doc)


def test_existing_cluster_with_kubeconfig_passes_without_aws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    result = run_task(capsys, "preflight", "--stack", str(metal_stack(tmp_path, kubeconfig)))
    assert result.returncode == 0, result.stderr
    assert "nothing to check on AWS" in " ".join(result.stdout.split())
    assert "preflight passed" in result.stdout


def test_existing_cluster_without_kubeconfig_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_task(capsys, "preflight", "--stack", str(metal_stack(tmp_path, tmp_path / "missing")))
    assert result.returncode == 1
    assert "gpufleet:cluster.kubeconfig" in result.stdout
    assert result.stderr.strip().startswith("error: preflight found 1 error(s)")
