"""Whole-output snapshots of the pure builders for the example stacks, reviewed as a diff when they change.

Pinned versions are left out (a version bump is reviewed in infra/versions.py, not here).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from infra.aws.nodepools import plan_node_groups
from infra.gpu_stack.gpu_operator import gpu_operator_values
from tests.conftest import EXAMPLE_STACKS, load_example


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_gpu_operator_values(stack: str, snapshot: SnapshotAssertion) -> None:
    assert gpu_operator_values(load_example(stack)) == snapshot


def _plan(plan: Any) -> dict[str, Any]:
    out = dataclasses.asdict(plan)
    out["release_version"] = "<pinned>"
    out["launch_template"] = plan.launch_template({"tag": "value"}, "<cluster-sg>", "<placement-group>")
    return out


@pytest.mark.parametrize("stack", ["dev", "example-prod"])
def test_node_group_plans(stack: str, snapshot: SnapshotAssertion) -> None:
    assert [_plan(p) for p in plan_node_groups(load_example(stack))] == snapshot
