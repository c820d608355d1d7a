"""The Kueue chart as the stacks' Helm release renders it: `helm template` from the twin's toolchain (the pinned
Helm and the chart of the pinned Kueue module), with a stack's own values."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from infra.errors import ToolMissing
from infra.scheduling import scheduler_inputs
from infra.stackfile import load_stack
from infra.versions import PER_MINOR
from scheduler.kueue_config import kueue_values
from scheduler.yamltext import dump_text
from tests.conftest import ROOT
from tests.support import require
from twin.kueue import render_chart
from twin.toolchain.build import Toolchain, locate

Render = Callable[..., list[dict[str, Any]]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/kueue/" in str(item.fspath):
            item.add_marker(pytest.mark.toolchain)


@pytest.fixture(scope="session")
def tools() -> Toolchain:
    minor = load_stack(ROOT / "Pulumi.metal.yaml").cluster.kubernetes_version
    try:
        return locate(minor, lambda _line: None)
    except ToolMissing as exc:
        require(f"the twin's toolchain (helm, the Kueue chart) is missing: {exc}")


@pytest.fixture(scope="session")
def render(tools: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Render:
    """`render(stack, config_gates, **controller_manager)`: the chart with the stack's values, `controllerManager`
    keys added and `config_gates` as the manager configuration's `featureGates` (each rendering once a session;
    every call gets its own copy)."""
    done: dict[str, list[dict[str, Any]]] = {}

    def rendered(
        stack: str, config_gates: dict[str, bool] | None = None, **controller_manager: Any
    ) -> list[dict[str, Any]]:
        key = json.dumps([stack, config_gates, controller_manager], sort_keys=True)
        if key not in done:
            spec = load_stack(ROOT / f"Pulumi.{stack}.yaml")
            policy, _ = scheduler_inputs(spec)
            values = kueue_values(policy)
            values["controllerManager"].update(controller_manager)
            if config_gates:
                manager = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
                values["managerConfig"]["controllerManagerConfigYaml"] = dump_text(
                    {**manager, "featureGates": config_gates}
                )
            patch = PER_MINOR[spec.cluster.kubernetes_version].kubernetes_patch
            done[key] = render_chart(
                tools["helm"], tools.data["chart"], values, patch, tmp_path_factory.mktemp("chart")
            )
        return copy.deepcopy(done[key])

    return rendered
