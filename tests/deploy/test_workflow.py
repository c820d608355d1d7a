"""The CI workflow: valid against GitHub's workflow schema (vendored, offline) and shaped as documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "infra.yml"
CHECK = Path(sys.executable).parent / "check-jsonschema"


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHECK), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def job(workflow: dict[Any, Any]) -> dict[str, Any]:
    (only,) = workflow["jobs"].values()
    return only


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(action + "@")]


def test_schema_valid() -> None:
    result = schema_check(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "infra.yml"
    broken.write_text(WORKFLOW.read_text().replace("id-token: write", "id-token: maybe"))
    result = schema_check(broken)
    assert result.returncode == 1
    assert "id-token" in result.stdout + result.stderr


def test_preview_on_pull_requests_and_up_only_on_main(workflow: dict[Any, Any], job: dict[str, Any]) -> None:
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"pull_request", "push"}
    assert triggers["push"]["branches"] == ["main"]
    (preview,) = [
        s for s in steps_using(job, "pulumi/actions") if s.get("with", {}).get("command") == "preview"
    ]
    assert preview["if"] == "github.event_name == 'pull_request'"
    assert preview["with"]["comment-on-pr"] is True
    assert preview["with"]["github-token"] == "${{ secrets.GITHUB_TOKEN }}"
    (up,) = [s for s in job["steps"] if "invoke deploy" in s.get("run", "")]
    assert up["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    for step in job["steps"]:
        if "run" in step and ("invoke deploy" in step["run"] or "pulumi up" in step["run"]):
            assert "refs/heads/main" in step["if"]


def test_oidc_role_assumption(workflow: dict[Any, Any], job: dict[str, Any]) -> None:
    assert workflow["permissions"]["id-token"] == "write"
    assert workflow["permissions"]["pull-requests"] == "write"
    (creds,) = steps_using(job, "aws-actions/configure-aws-credentials")
    assert creds["with"]["role-to-assume"] == "${{ vars.AWS_DEPLOY_ROLE_ARN }}"
    assert not {"aws-access-key-id", "aws-secret-access-key"} & set(creds["with"])
    names = [s.get("name", s.get("uses")) for s in job["steps"]]
    first_aws_use = min(
        names.index("Preflight"), names.index("Preview"), names.index("Up (preflight, then pulumi up)")
    )
    assert job["steps"].index(creds) < first_aws_use


def test_one_concurrency_group_per_stack(job: dict[str, Any]) -> None:
    assert "${{ matrix.stack }}" in job["concurrency"]["group"]
    assert job["concurrency"]["cancel-in-progress"] is False
    stacks = job["strategy"]["matrix"]["stack"]
    assert stacks and all((ROOT / f"Pulumi.{s}.yaml").is_file() for s in stacks)


def test_actions_pinned_and_python_311(job: dict[str, Any]) -> None:
    for step in job["steps"]:
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+(\.\d+){0,2}|[0-9a-f]{40})", step["uses"]), step[
                "uses"
            ]
    (python,) = steps_using(job, "actions/setup-python")
    assert python["with"]["python-version"] == "3.11"
    assert any("pip install -e ." in s.get("run", "") for s in job["steps"])
