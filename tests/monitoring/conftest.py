"""Fixtures for the operations tests: promtool and prometheus from Debian's `prometheus` package, test specs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from tests.conftest import ROOT
from tests.infra.conftest import mocks  # noqa: F401 (the Pulumi mocks fixture, shared)


def _install_prometheus() -> None:
    """As the Ansible tests do for debootstrap: install the missing Debian package when running as root, so
    the README's test command works on a fresh machine (no-op elsewhere; the fixture then explains)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
        check=False,
        env=env,
        capture_output=True,
    )


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        _install_prometheus()
        path = shutil.which(name)
    if path is None:
        message = (
            f"{name} not found: apt-get install prometheus (Debian's package ships prometheus and promtool)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return _tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return _tool("prometheus")


def run_promtool(promtool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def ops_spec(**monitoring: Any) -> ClusterSpec:
    """example-prod with two teams' thresholds set and the given monitoring settings."""
    config = yaml.safe_load((ROOT / "Pulumi.example-prod.yaml").read_text())["config"]
    config["gpufleet:cluster"]["monitoring"] = {"prometheus": "install", "grafana": True, **monitoring}
    teams = config["gpufleet:teams"]
    teams[0]["idleAfter"] = "30m"
    teams[1]["pendingAfter"] = "2h"
    return parse_config(config, "ops")
