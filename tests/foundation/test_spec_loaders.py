"""`load_stack` (a file) and `load_pulumi_config` (the running program) give the same object."""

from __future__ import annotations

import json

import pulumi
import pytest
import yaml

from infra.pulumi_config import load_pulumi_config
from infra.stackfile import load_stack
from tests.conftest import EXAMPLE_STACKS, ROOT


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_both_loaders_agree(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / f"Pulumi.{stack}.yaml"
    config = yaml.safe_load(path.read_text())["config"]
    # The Pulumi CLI hands objects to the program as JSON strings and scalars as plain strings.
    as_cli = {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    monkeypatch.setattr(pulumi, "get_stack", lambda: stack)
    pulumi.runtime.set_all_config(as_cli)
    try:
        from_program = load_pulumi_config()
    finally:
        pulumi.runtime.set_all_config({})
    assert from_program == load_stack(path)
    assert from_program.stack == stack
