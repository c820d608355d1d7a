"""Shared fixtures: the repository root, the reference data beside it, and the example stacks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from tests.support import require

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_STACKS = ("dev", "example-prod", "metal", "example-karpenter")


def shared_path() -> Path:
    return Path(os.environ.get("GPUFLEET_SHARED", ROOT.parent / "shared"))


# Fixtures that hand a test a program of the twin's toolchain (tests/monitoring/conftest.py).
TOOLCHAIN_FIXTURES = {"promtool", "prometheus_bin"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that runs a program of the toolchain is a `toolchain` test (it waits for the build in `invoke test`)."""
    for item in items:
        if TOOLCHAIN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.toolchain)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The reference data (CRDs, traces). Missing data fails in CI and skips elsewhere."""
    path = shared_path()
    found = (path / "crds").is_dir() and (path / "traces").is_dir()
    require(found, f"reference data not found at {path} (set GPUFLEET_SHARED)")
    return path


@pytest.fixture(scope="session", params=EXAMPLE_STACKS)
def example_spec(request: pytest.FixtureRequest) -> ClusterSpec:
    return load_stack(ROOT / f"Pulumi.{request.param}.yaml")


def load_example(name: str) -> ClusterSpec:
    return load_stack(ROOT / f"Pulumi.{name}.yaml")
