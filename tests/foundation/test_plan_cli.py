"""`invoke plan` as a user runs it: exit codes, messages without tracebacks, files written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, load_example


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("stack", ["dev", "example-prod", "metal"])
def test_plan_examples_exit_0_and_write_files(stack: str, tmp_path: Path) -> None:
    result = invoke("plan", "--stack", stack, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["stack"] == stack
    markdown = (tmp_path / "plan.md").read_text()
    # the placement strategy up front: the plan says how GPUs are placed
    strategy = load_example(stack).scheduling.placement.strategy
    assert plan["placement"] == strategy and f"GPU placement {strategy}" in markdown.splitlines()[0]
    for pool in plan["pools"]:
        assert pool["name"] in result.stdout
        assert f"| {pool['name']} |" in markdown


def test_plan_defaults_to_dev_stack() -> None:
    result = invoke("plan")
    assert result.returncode == 0, result.stderr
    assert "Plan for stack 'dev'" in result.stdout
    assert json.loads((ROOT / "build/dev/plan.json").read_text())["stack"] == "dev"


BAD = {
    # botocore's bundled endpoint data knows every region with EC2
    "unknown-region": (
        "config:\n  aws:region: us-west-9\n  gpufleet:platform: aws\n  gpufleet:cluster: {name: x}\n"
        "  gpufleet:nodePools:\n    - {name: a, instanceType: g6e.xlarge, maxSize: 1}\n",
        "aws:region: 'us-west-9' is not an AWS region with EC2; did you mean us-west-2",
    ),
    "bad-values": (
        "config:\n  aws:region: us-west-2\n  gpufleet:platform: aws\n  gpufleet:cluster: {name: x}\n"
        "  gpufleet:nodePools:\n    - {name: a, instanceType: g6e.xlarge, maxSize: 1, desiredSize: 2}\n",
        "gpufleet:nodePools[0]",
    ),
    "yaml-syntax": ("config:\n  gpufleet:platform: [aws\n", "YAML syntax error at line"),
    "unknown-key": (
        "config:\n  gpufleet:platform: aws\n  gpufleet:clustr: {}\n",
        "gpufleet:clustr: unknown key; did you mean 'gpufleet:cluster'?",
    ),
    # A key given twice is refused, not silently the last value: YAML 1.2 requires unique keys (spec
    # 3.2.1.1), and Pulumi's own reader (gopkg.in/yaml.v3) refuses them ("already defined").
    "duplicate-key": (
        "config:\n  aws:region: us-west-2\n  gpufleet:platform: aws\n  gpufleet:cluster: {name: x}\n"
        "  gpufleet:nodePools:\n    - name: a\n      instanceType: g6e.xlarge\n      maxSize: 2\n      maxSize: 5\n",
        "line 9, column 7: duplicate key 'maxSize' (first at line 8)",
    ),
    "region-typo": (
        "config:\n  aws:regoin: us-west-2\n  gpufleet:platform: aws\n  gpufleet:cluster: {name: x}\n"
        "  gpufleet:nodePools:\n    - {name: a, instanceType: g6e.xlarge, maxSize: 1}\n",
        "aws:regoin: not an AWS provider setting; did you mean 'aws:region'?",
    ),
    # Errors that say what to do.
    "nested-key-typo": (
        "config:\n  aws:region: us-west-2\n  gpufleet:platform: aws\n  gpufleet:cluster: {name: x}\n"
        "  gpufleet:nodePools:\n    - {name: a, instanceType: g6e.xlarge, maxSzie: 1}\n",
        "gpufleet:nodePools[0].maxSzie: unknown key (did you mean 'maxSize'?",
    ),
    "unquoted-version": (
        "config:\n  aws:region: us-west-2\n  gpufleet:platform: aws\n"
        "  gpufleet:cluster: {name: x, kubernetesVersion: 1.30}\n"
        "  gpufleet:nodePools:\n    - {name: a, instanceType: g6e.xlarge, maxSize: 1}\n",
        "kubernetesVersion: expected a string, got the number 1.3: YAML reads an unquoted 1.30 as the number 1.3; put the value in quotes",
    ),
    "team-name-pattern": (
        "config:\n  aws:region: us-west-2\n  gpufleet:platform: aws\n  gpufleet:cluster: {name: x}\n"
        "  gpufleet:nodePools:\n    - {name: a, instanceType: g6e.xlarge, maxSize: 1}\n"
        "  gpufleet:teams:\n    - {name: ML_Team, quotas: {a: 1}}\n",
        "gpufleet:teams[0].name: expected lowercase letters, digits and '-', starting and ending with a letter or "
        "digit (a DNS label) (got 'ML_Team')",
    ),
    "no-config-section": (
        "gpufleet:platform: aws\ngpufleet:cluster: {name: x}\n",
        "gpufleet:platform, gpufleet:cluster: at the top level of the file; stack settings go under `config:`",
    ),
}


def test_non_utf8_stack_file_exits_2_naming_the_byte(tmp_path: Path) -> None:
    """Pulumi reads stack files as UTF-8: a Latin-1 stack file is bad input (exit 2, no UnicodeDecodeError
    traceback), and the error names the byte's line and column."""
    stack_file = tmp_path / "Pulumi.latin1.yaml"
    stack_file.write_bytes(
        "config:\n  gpufleet:platform: aws\n  gpufleet:cluster: {name: caf\u00e9}\n".encode("latin-1")
    )
    result = invoke("plan", "--stack", str(stack_file))
    assert result.returncode == 2
    assert "not UTF-8 text: byte 0xe9 at line 3, column 31" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_exits_2_without_traceback(case: str, tmp_path: Path) -> None:
    text, expected = BAD[case]
    stack_file = tmp_path / "Pulumi.bad.yaml"
    stack_file.write_text(text)
    result = invoke("plan", "--stack", str(stack_file), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "out").exists(), "nothing is written for a bad stack"


def test_missing_stack_exits_2_and_lists_stacks() -> None:
    result = invoke("plan", "--stack", "nope")
    assert result.returncode == 2
    assert "stack file not found" in result.stderr and "example-prod" in result.stderr
    assert "Traceback" not in result.stderr
