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
    (job,) = doc["jobs"].values()
    build = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    assert build["with"]["push"] == "${{ github.event_name == 'push' }}"
    meta = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/metadata-action@"))
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
    """The image installs numpy, kubernetes and PyYAML only: importing the server pulls in nothing else."""
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
