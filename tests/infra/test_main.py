"""The Pulumi program file itself: stack config in, resources and exported outputs out (under mocks)."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime.stack import Stack

from tests.infra.conftest import Mocks, after_registration


def _pulumi_config_env(stack_file: Path) -> str:
    """PULUMI_CONFIG as the Pulumi CLI sets it: `<namespace>:config:<key>` -> string (objects as JSON)."""
    config = yaml.safe_load(stack_file.read_text())["config"]
    env = {}
    for key, value in config.items():
        namespace, name = key.split(":", 1)
        env[f"{namespace}:config:{name}"] = value if isinstance(value, str) else json.dumps(value)
    return json.dumps(env)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_main_reads_the_stack_config_and_exports_the_outputs(
    mocks: Mocks, repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> pulumi.Output[Any]:
    monkeypatch.setenv("PULUMI_CONFIG", _pulumi_config_env(repo_root / "Pulumi.dev.yaml"))
    stack = pulumi.runtime.settings.get_root_resource()  # the mocks' root stack receives the exports
    assert isinstance(stack, Stack)
    runpy.run_path(str(repo_root / "infra" / "__main__.py"), run_name="__main__")

    def check() -> None:
        assert mocks.one("aws:eks/cluster:Cluster", "gpufleet-dev").inputs["version"] == "1.35"
        exported = set(stack.outputs)
        assert exported == {
            "cluster_name",
            "endpoint",
            "kubeconfig",
            "node_group_names",
            "oidc_provider_arn",
            "rolloutFacts",  # what the next `invoke preview` compares the stack file against
        }

    return after_registration(check)


def test_importing_build_loads_no_pulumi_and_creates_nothing(repo_root: Path) -> None:
    code = (
        "import sys; from infra import build; import infra.program; "
        "assert callable(build); "
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pulumi', 'pulumi_aws', 'pulumi_kubernetes')); "
        "print(loaded)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
