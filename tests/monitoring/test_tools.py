"""The rule tests run on the chart's Prometheus major version or not at all: a missing or 2.x promtool skips
them with the way to build 3.x, and fails them under CI=true (a CI run must not pass by skipping)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.monitoring import conftest


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("GPUFLEET_TWIN_BIN", str(folder))
    monkeypatch.setenv("GPUFLEET_TWIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(folder))
    return folder


def _fake(folder: Path, version: str) -> None:
    tool = folder / "promtool"
    tool.write_text(f"#!/bin/sh\necho 'promtool, version {version} (branch: debian/sid)'\n")
    tool.chmod(0o755)


def test_a_2x_promtool_is_refused(bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's package is Prometheus 2.42: found, but not the release the chart runs, and named."""
    _fake(bin_dir, "2.42.0")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(
        pytest.fail.Exception, match=r"promtool is not prometheus v0\.314\.0 .*version 2\.42\.0"
    ):
        conftest._tool("promtool")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="twin-build"):
        conftest._tool("promtool")


def test_a_missing_promtool_fails_under_ci(bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not found"):
        conftest._tool("promtool")


def test_a_3x_promtool_is_used(bin_dir: Path) -> None:
    _fake(bin_dir, "3.14.0")
    assert conftest._tool("promtool") == str(bin_dir / "promtool")
