"""The CI workflow: valid against GitHub's workflow schema (vendored, offline) and shaped as documented."""

from __future__ import annotations

import json
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


EXAMPLES = tuple(sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml")))
SHA_PIN = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}")


@pytest.fixture(scope="module")
def jobs(workflow: dict[Any, Any]) -> dict[str, dict[str, Any]]:
    return workflow["jobs"]


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(action + "@")]


def runs(job: dict[str, Any], text: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if text in s.get("run", "")]


def test_schema_valid() -> None:
    result = schema_check(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "infra.yml"
    broken.write_text(WORKFLOW.read_text().replace("id-token: write", "id-token: maybe"))
    result = schema_check(broken)
    assert result.returncode == 1
    assert "id-token" in result.stdout + result.stderr


def test_pull_requests_get_the_read_only_role_and_no_passphrase(
    workflow: dict[Any, Any], jobs: dict[str, dict[str, Any]]
) -> None:
    """GitHub docs, "Security hardening your deployments" / OIDC in AWS: a role's trust policy can name the
    `sub` claim `repo:<owner>/<repo>:pull_request`; code from a pull request must not get deploy rights, and
    the passphrase decrypts every secret in the state. So the pull-request job assumes the read-only role,
    has no secret in its environment and runs only preflight and the offline plan."""
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"pull_request", "push"} and triggers["push"]["branches"] == ["main"]
    assert workflow["permissions"] == {"contents": "read"}
    preview = jobs["preview"]
    assert preview["if"].startswith("github.event_name == 'pull_request'")
    (creds,) = steps_using(preview, "aws-actions/configure-aws-credentials")
    assert creds["with"]["role-to-assume"] == "${{ vars.AWS_PREVIEW_ROLE_ARN }}"
    assert "secrets." not in yaml.safe_dump(preview) and "environment" not in preview
    assert [s["name"] for s in preview["steps"] if "run" in s][-2:] == ["Preflight", "Plan"]
    assert not runs(preview, "invoke deploy") and not runs(preview, "pulumi ")
    assert preview["permissions"] == {"contents": "read", "id-token": "write"}


def test_deploys_use_their_own_role_only_from_main_in_a_protected_environment(
    jobs: dict[str, dict[str, Any]],
) -> None:
    """GitHub docs, OIDC `sub` claim for a job with an environment: `repo:<owner>/<repo>:environment:<name>`;
    the deploy role trusts only that, and the environment's deployment branches allow only main. The
    passphrase is an environment secret, so only this job can read it."""
    deploy = jobs["deploy"]
    assert deploy["if"].startswith("github.event_name == 'push' && github.ref == 'refs/heads/main'")
    assert deploy["environment"] == "production"
    (creds,) = steps_using(deploy, "aws-actions/configure-aws-credentials")
    assert creds["with"]["role-to-assume"] == "${{ vars.AWS_DEPLOY_ROLE_ARN }}"
    assert not {"aws-access-key-id", "aws-secret-access-key"} & set(creds["with"])
    assert deploy["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
    assert deploy["concurrency"]["cancel-in-progress"] is False
    assert "${{ matrix.stack }}" in deploy["concurrency"]["group"]


def test_a_deploy_that_cannot_reach_the_api_fails_at_preflight(jobs: dict[str, dict[str, Any]]) -> None:
    """Preflight (infra.preflight.reachability) refuses a runner outside the endpoint's allow-list; it runs as
    its own step after the credentials and before `invoke deploy`, so the run fails in seconds with the
    reason, not after the cluster was created."""
    deploy = jobs["deploy"]
    names = [s.get("name", s.get("uses")) for s in deploy["steps"]]
    (creds,) = steps_using(deploy, "aws-actions/configure-aws-credentials")
    preflight, up = names.index("Preflight"), names.index("Up (preflight again, then pulumi up)")
    assert deploy["steps"].index(creds) < preflight < up
    assert deploy["steps"][preflight]["run"] == '.venv/bin/invoke preflight --stack "$STACK"'


def test_example_stacks_are_never_deployed(jobs: dict[str, dict[str, Any]]) -> None:
    """The examples name placeholder accounts, reservations and addresses: a deploy matrix lists the user's own
    stacks (vars.GPUFLEET_STACKS), and the deploy job refuses an example name even if listed."""
    for job in jobs.values():
        matrix = job["strategy"]["matrix"]["stack"]
        assert matrix == "${{ fromJSON(vars.GPUFLEET_STACKS) }}"
        assert "vars.GPUFLEET_STACKS != ''" in job["if"]
    guard = jobs["deploy"]["steps"][0]
    assert guard["name"] == "Refuse the example stacks"
    script = guard["run"]
    for stack, code in (*((e, 1) for e in EXAMPLES), ("prod", 0)):
        result = subprocess.run(["bash", "-c", script], env={"STACK": stack}, capture_output=True, text=True)
        assert result.returncode == code, (stack, result.stdout)


def test_actions_pinned_by_commit_and_python_311(jobs: dict[str, dict[str, Any]]) -> None:
    """GitHub docs, "Security hardening for GitHub Actions": pinning an action to a full-length commit SHA is
    the only way to use it as an immutable release (a tag can be moved)."""
    for job in jobs.values():
        for step in job["steps"]:
            if "uses" in step:
                assert SHA_PIN.fullmatch(step["uses"]), step["uses"]
        (python,) = steps_using(job, "actions/setup-python")
        assert python["with"]["python-version"] == "3.11"
        assert runs(job, "pip install -e .")
        (checkout,) = steps_using(job, "actions/checkout")
        assert checkout["with"]["persist-credentials"] is False
    # the stack file is read with the loader that exists (infra.stackfile), not an import that fails
    assert all(
        "from infra.stackfile import load_stack" in s["run"]
        for j in jobs.values()
        for s in runs(j, "load_stack")
    )


def test_the_docs_show_both_trust_policies() -> None:
    """docs/deploy.md shows the two trust policies the workflow relies on, as valid JSON."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.S)
    subs = []
    for block in blocks:
        doc = json.loads(block)
        for statement in doc.get("Statement", []):
            cond = statement.get("Condition", {})
            subs += [v for k, v in cond.get("StringEquals", {}).items() if k.endswith(":sub")]
            subs += [v for k, v in cond.get("StringLike", {}).items() if k.endswith(":sub")]
    assert any(str(s).endswith(":pull_request") for s in subs)
    assert any(str(s).endswith(":environment:production") for s in subs)


@pytest.mark.parametrize("path", sorted((ROOT / ".github" / "workflows").glob("*.yml")), ids=lambda p: p.name)
def test_every_workflow_pins_its_actions_by_commit(path: Path) -> None:
    """GitHub docs, "Security hardening for GitHub Actions": a tag can be moved, a full-length commit SHA cannot;
    this holds for every workflow, the image build included."""
    doc = yaml.safe_load(path.read_text())
    uses = [s["uses"] for job in doc["jobs"].values() for s in job.get("steps", []) if "uses" in s]
    assert uses, path.name
    assert [u for u in uses if not SHA_PIN.fullmatch(u)] == []


def test_the_pull_request_preview_does_not_check_reachability(jobs: dict[str, dict[str, Any]]) -> None:
    """The preview runner never deploys, and GitHub-hosted runner addresses come from broad shared ranges no
    endpoint allow-list names: its preflight skips reachability; the deploy job's preflight keeps it."""
    (preview,) = [s for s in jobs["preview"]["steps"] if s.get("name") == "Preflight"]
    assert preview["run"] == '.venv/bin/invoke preflight --stack "$STACK" --skip-reachability'
    (deploy,) = [s for s in jobs["deploy"]["steps"] if s.get("name") == "Preflight"]
    assert "--skip-reachability" not in deploy["run"]
