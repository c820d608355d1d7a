"""Stack variants for preflight tests, and running the real `invoke` task in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from invoke import Collection, Program

from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from tests.conftest import ROOT


def stack_doc(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text())


def write_stack(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def variant(tmp_path: Path, name: str, base: str = "example-prod", **config: Any) -> ClusterSpec:
    """The example stack with some `config:` keys replaced, loaded through the real loader."""
    doc = stack_doc(base)
    doc["config"].update(config)
    return load_stack(write_stack(tmp_path, name, doc))


def invoke(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """Run a task as a user does; the environment (credentials, endpoint) is the test's."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@dataclass(frozen=True)
class TaskResult:
    returncode: int
    stdout: str
    stderr: str


def run_task(capsys: pytest.CaptureFixture[str], *args: str) -> TaskResult:
    """Run a task in this process through invoke's own Program (faster than a subprocess; same exit codes)."""
    import tasks

    program = Program(namespace=Collection.from_module(tasks), version="test")
    capsys.readouterr()
    code = 0
    try:
        program.run(["invoke", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return TaskResult(code, captured.out, captured.err)
