"""docs/aws.md "Choosing an autoscaler" stays true: its example loads and builds, its defaults are the code's."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from infra.aws.karpenter import pools as kp
from infra.aws.karpenter.pools import node_pool
from infra.stackfile import parse_config
from scheduler.validation import cel_problems, crd_problems
from tests.karpenter.conftest import example_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "aws.md"


def section() -> str:
    text = DOC.read_text()
    start = text.index("## Choosing an autoscaler")
    return text[start : text.index("\n## ", start + 1)]


def test_the_documented_pool_loads_and_builds_a_valid_nodepool(karpenter_schemas: dict) -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", section(), flags=re.S)
    (documented,) = yaml.safe_load(block)["gpufleet:nodePools"]
    config = example_config("example-karpenter")
    config["gpufleet:nodePools"] = [
        documented if p["name"] == documented["name"] else p for p in config["gpufleet:nodePools"]
    ]
    spec = parse_config(config, "doc")
    np = node_pool(spec, spec.pool(documented["name"]))
    assert crd_problems(np, karpenter_schemas) + cel_problems(np, karpenter_schemas) == []
    assert np["spec"]["disruption"]["budgets"][2]["schedule"] == "0 8 * * mon-fri"


def test_documented_defaults_are_the_codes() -> None:
    text = section()
    assert f"consolidateAfter: {kp.TRAINING_CONSOLIDATE_AFTER}" in text
    assert f"inference {kp.INFERENCE_CONSOLIDATE_AFTER}" in text
    assert "training: Drifted 0 nodes, Empty 20%" in text
    assert kp.TERMINATION_GRACE == {"spot": "90s", "capacity-block": "9m", "on-demand": "15m"}
    assert "90 s when Spot is allowed,\n9 min for a capacity block, 15 min otherwise" in text
    for heading in ("What the cluster-autoscaler cannot do", "What gpufleet does not run on Karpenter"):
        assert heading in text
