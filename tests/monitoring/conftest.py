"""Fixtures for the operations tests: promtool and prometheus 3.x from the project's toolchain, test specs.

The chart runs Prometheus v3.14.0 (kube-prometheus-stack 88.5.3), and 3.x evaluates differently from 2.x
(left-open range selectors, among others), so every rule and query is checked with the toolchain's build of
that version (`infra.versions.TWIN_PROMETHEUS`, built into the twin cache by `invoke twin-build`), never with a
distribution's 2.x. Missing there, the tests skip with how to build it, and fail under CI=true.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.errors import ToolMissing
from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from infra.versions import TWIN_ALERTMANAGER, TWIN_PROMETHEUS
from tests.conftest import ROOT
from tests.infra.conftest import mocks  # noqa: F401 (the Pulumi mocks fixture, shared)
from tests.support import require
from twin.toolchain.build import BUILD_HINT, find_program

MIN_MAJOR = 3


def major_version(path: Path) -> int | None:
    """The major version a Prometheus program reports (`<name>, version 3.14.0 (...)`)."""
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    found = re.search(r"version (\d+)\.", out.stdout + out.stderr)
    return int(found.group(1)) if found else None


def _tool(name: str) -> str:
    try:
        path = find_program(TWIN_PROMETHEUS, name)
    except ToolMissing as exc:  # found, but not the release the chart runs (a distribution's 2.x, say)
        require(f"{name} {TWIN_PROMETHEUS.note} from the toolchain is needed: {exc}")
    major = major_version(path) if path else None
    if path is None or major is None or major < MIN_MAJOR:
        found = f"found {path} (version {major})" if path else "not found"
        require(f"{name} {TWIN_PROMETHEUS.note} from the toolchain is needed, {found}: {BUILD_HINT}")
    return str(path)


@pytest.fixture(scope="session")
def promtool() -> str:
    return _tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return _tool("prometheus")


@pytest.fixture(scope="session")
def alertmanager_bin() -> str:
    """Alertmanager from the toolchain: like the fixtures above, it makes its tests `toolchain` tests, which
    `invoke test` runs once the toolchain is built, not beside a cold build."""
    try:
        path = find_program(TWIN_ALERTMANAGER, "alertmanager")
    except ToolMissing as exc:
        require(f"alertmanager {TWIN_ALERTMANAGER.version} from the toolchain is needed: {exc}")
    if path is None:
        require(f"alertmanager {TWIN_ALERTMANAGER.version} from the toolchain is needed: {BUILD_HINT}")
    return str(path)


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
