"""The extender image's build: the workflow is valid and never pushes `latest`; the Dockerfile is pinned and
installs what the extender imports, nothing of Pulumi."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "extender-image.yml"
CHECK = Path(sys.executable).parent / "check-jsonschema"


def test_workflow_is_schema_valid_and_pushes_only_from_main_or_tags() -> None:
    result = subprocess.run([str(CHECK), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = doc["jobs"]
    assert jobs["check"]["if"] == "github.event_name == 'pull_request'"
    assert jobs["publish"]["if"] == "github.event_name == 'push'"
    for name, push in (("check", False), ("publish", True)):
        steps = jobs[name]["steps"]
        build = next(s for s in steps if s.get("uses", "").startswith("docker/build-push-action@"))
        assert build["with"]["push"] is push, name
        meta = next(s for s in steps if s.get("uses", "").startswith("docker/metadata-action@"))
        assert "latest" not in meta["with"]["tags"]
    # (every action pinned by commit: tests/deploy/test_workflow.py checks every workflow)


def test_dockerfile_pins_the_base_and_runs_the_extender_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM (\S+)", text, flags=re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base)
    assert "pulumi" not in text.lower().replace("# ", "")
    assert re.search(r"^USER 65532", text, flags=re.M)
    assert 'ENTRYPOINT ["python", "-m", "scheduler.extender"]' in text


def test_the_extender_imports_nothing_the_image_lacks() -> None:
    """The image installs numpy, kubernetes, PyYAML and prometheus-client only: importing the server pulls in
    nothing else."""
    code = ("import sys, scheduler.extender.__main__, scheduler.extender.watch;"
            "print(sorted({m.split('.')[0] for m in sys.modules}))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    loaded = set(ast.literal_eval(out.stdout))
    assert not loaded & {
        "pulumi",
        "pulumi_aws",
        "pulumi_kubernetes",
        "pydantic",
        "matplotlib",
        "infra",
        "rich",
    }


def run_image_step(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """The workflow's `image` step as a runner runs it: its `run` script under `bash -e {0}`, the default shell
    of a step without `shell` on Linux runners (GitHub Docs, "Workflow syntax for GitHub Actions",
    jobs.<job_id>.steps[*].shell), with the runner's default variables (GITHUB_EVENT_NAME,
    GITHUB_REPOSITORY_OWNER, GITHUB_REF_TYPE, GITHUB_REF_NAME; "Variables reference") and a GITHUB_OUTPUT file."""
    import os

    doc = yaml.safe_load(WORKFLOW.read_text())
    job = doc["jobs"]["check" if env.get("GITHUB_EVENT_NAME") == "pull_request" else "publish"]
    (step,) = [s for s in job["steps"] if s.get("id") == "image"]
    assert "shell" not in step
    script = tmp_path / "step.sh"
    script.write_text(step["run"].replace(".venv/bin/python", sys.executable))  # the venv the step made
    output = tmp_path / "output"
    output.write_text("")
    defaults = {"GITHUB_EVENT_NAME": "push", "GITHUB_REPOSITORY_OWNER": "gpufleet", "GITHUB_REF_TYPE": "branch",
                "GITHUB_REF_NAME": "main"}  # fmt: skip
    environ = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output), **defaults, **env}
    done = subprocess.run(["bash", "-e", str(script)], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return done, outputs


def test_the_workflow_pushes_where_the_stacks_pull(tmp_path: Path) -> None:
    """The image's name comes from infra/versions.py (EXTENDER_REPOSITORY, registry and owner IMAGE_REGISTRY),
    so what the workflow pushes is what the stacks deploy; its login and metadata steps use that step's outputs."""
    from infra.versions import EXTENDER_REPOSITORY, IMAGE_REGISTRY

    done, outputs = run_image_step(tmp_path, GITHUB_REPOSITORY_OWNER=IMAGE_REGISTRY.split("/")[1].upper())
    assert done.returncode == 0, done.stderr
    assert outputs == {"name": EXTENDER_REPOSITORY, "registry": IMAGE_REGISTRY.split("/")[0]}
    doc = yaml.safe_load(WORKFLOW.read_text())
    job = doc["jobs"]["publish"]
    login = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/login-action@"))
    assert login["with"]["registry"] == "${{ steps.image.outputs.registry }}"
    build = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    summary = next(s for s in job["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert summary["env"]["DIGEST"] == f"${{{{ steps.{build['id']}.outputs.digest }}}}"


def test_the_workflow_refuses_another_owner_and_a_tag_of_another_release(tmp_path: Path) -> None:
    """A fork (another owner) would push an image no stack pulls, and a tag that is not PROJECT_VERSION an image
    no stack deploys: both stop before the build with the line to change. Pull requests build without pushing,
    so the owner does not matter there."""
    from infra.versions import PROJECT_VERSION

    fork, _ = run_image_step(tmp_path, GITHUB_REPOSITORY_OWNER="someone")
    assert fork.returncode == 1
    assert 'set IMAGE_REGISTRY = "ghcr.io/someone"' in fork.stdout
    other, _ = run_image_step(tmp_path, GITHUB_REF_TYPE="tag", GITHUB_REF_NAME="v9.9.9")
    assert other.returncode == 1 and f"PROJECT_VERSION {PROJECT_VERSION}" in other.stdout
    release, _ = run_image_step(tmp_path, GITHUB_REF_TYPE="tag", GITHUB_REF_NAME=f"v{PROJECT_VERSION}")
    assert release.returncode == 0, release.stderr
    pull_request, _ = run_image_step(
        tmp_path, GITHUB_EVENT_NAME="pull_request", GITHUB_REPOSITORY_OWNER="someone"
    )
    assert pull_request.returncode == 0, pull_request.stderr


def test_only_the_push_job_may_write_packages_and_no_job_keeps_git_credentials() -> None:
    """GitHub Actions "Controlling permissions for GITHUB_TOKEN": a workflow-level grant reaches every job, pull
    requests included, and `permissions` takes no expressions, so only a job that runs on push may hold
    `packages: write`. actions/checkout README: `persist-credentials` (default true) leaves the token in the
    local git config for later steps; none of ours needs it."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert "packages" not in doc["permissions"]
    for name, job in doc["jobs"].items():
        writes = job.get("permissions", {}).get("packages") == "write"
        assert writes == (job["if"] == "github.event_name == 'push'"), name
        checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
        assert checkout["with"]["persist-credentials"] is False, name
