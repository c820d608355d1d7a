"""docs/teams.md as written, on the metal twin by a member of vision (impersonated with the team's group only):
every shell command of the page runs and succeeds in page order, the page's Job is submitted from the page's
YAML and admitted, and the plugin's answers land as Events the page's own query finds."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from scheduler.explain import cli
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.kube import Kube

PAGE = ROOT / "docs" / "teams.md"
GROUP = "vision-team"
NOT_HERE = ("pip install",)  # the install: this suite runs in the environment it makes


def commands() -> list[str]:
    """The page's Kubernetes commands: all but its Slurm section (tests/slurm/test_slurm_answers.py runs those)."""
    page = PAGE.read_text()
    head, _, rest = page.partition("\n## On a Slurm cluster")
    text = head + ("\n## " + rest.split("\n## ", 1)[1] if "\n## " in rest else "")
    lines = [line.strip() for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```", text, re.M | re.S)
             for line in block.splitlines()]  # fmt: skip
    return [line for line in lines if line and not line.startswith("#") and not line.startswith(NOT_HERE)]


def job_manifest() -> dict[str, object]:
    (doc,) = [d for b in re.findall(r"^```yaml\n(.*?)^```", PAGE.read_text(), re.M | re.S)
              for d in yaml.safe_load_all(b) if d and d.get("kind") == "Job"]  # fmt: skip
    return dict(doc)


@pytest.fixture
def folder(tmp_path: Path, metal_twin: Kube) -> Iterator[Path]:
    """The reader's folder, holding train.yaml as the page tells them to save it; the Job is gone after."""
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(job_manifest()))
    yield tmp_path
    metal_twin.delete("job", str(job_manifest()["metadata"]["name"]), "vision")  # type: ignore[index]


def run(kube: Kube, command: str, folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    argv = shlex.split(command)
    assert argv[0] == "kubectl", command
    argv = [str(folder / a) if (folder / a).is_file() else a for a in argv[1:]]
    if argv[0] == "gpufleet":
        code = cli.main(["--kubectl", str(kube.binary), "--kubeconfig", str(kube.kubeconfig),
                         "--as", "alice@example.com", "--as-group", GROUP, *argv[1:]])  # fmt: skip
        said = capsys.readouterr()
        assert code == 0, (command, said.err)
        return said.out
    result = kube.as_member((GROUP,)).attempt(*argv)
    assert result.ok, (command, result.err)
    return result.out


def admitted(kube: Kube, job: str) -> bool:
    for wl in kube.items("workloads.kueue.x-k8s.io", "vision"):
        owned = any(ref["name"] == job for ref in wl["metadata"].get("ownerReferences", []))
        conditions = wl.get("status", {}).get("conditions", [])
        if owned and any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions):
            return True
    return False


def in_use(kube: Kube) -> int:
    """The H100 GPUs vision's ClusterQueue counts in use (Kueue writes its status a moment after admitting)."""
    queue = json.loads(kube.ok("get", "clusterqueues.kueue.x-k8s.io", "vision", "-o", "json"))
    for flavor in queue.get("status", {}).get("flavorsUsage", []):
        for resource in flavor["resources"] if flavor["name"] == "h100" else []:
            if resource["name"] == "nvidia.com/gpu":
                return int(resource.get("total", 0))
    return 0


def test_every_command_of_the_page_runs_as_a_member(
    metal_twin: Kube, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = commands()
    assert any(c.startswith("kubectl gpufleet quota") for c in listed)
    job = str(job_manifest()["metadata"]["name"])  # type: ignore[index]
    said: dict[str, str] = {}
    for command in listed:
        if command.startswith(f"kubectl gpufleet why {job}"):  # its story once its pods run

            def running(c: str = command) -> bool:
                return "[Running]" in run(metal_twin, c, folder, capsys)

            eventually(running, f"{job} to run", 90)
        said[command] = run(metal_twin, command, folder, capsys)
        if command.startswith("kubectl create"):
            eventually(lambda: admitted(metal_twin, job), f"{job} to be admitted", 90)
            eventually(lambda: in_use(metal_twin) == 8, "vision's ClusterQueue to count the Job's GPUs", 60)
    events = next(out for c, out in said.items() if "--field-selector source=kubectl-gpufleet" in c)
    assert "Running" in events, events
    quota = next(out for c, out in said.items() if c.startswith("kubectl gpufleet quota"))
    assert re.search(r"^h100\s+nvidia.com/gpu\s+16\s+8\s", quota, re.M), quota  # the page's Job holds 8


def test_the_pages_invoke_tasks_answer_as_the_plugin(metal_twin: Kube) -> None:
    """The page's `invoke quota|queue|why` lines, with the twin's kubeconfig and kubectl and the team's group:
    the same answers as the plugin, through the task layer (exit 0; a job not there: exit 2, one line)."""
    quoted = [line for line in re.findall(r"`(invoke (?:quota|queue|why) [^`]+)`", PAGE.read_text())
              if "--stack" not in line]  # fmt: skip  # the Slurm section's (tests/slurm/test_slurm_answers.py)
    assert len(quoted) == 3, quoted

    def gone() -> bool:  # the page's job, if the test above made it, has left with its Workload
        return not any(ref["name"] == "train-h100" for wl in metal_twin.items("workloads.kueue.x-k8s.io", "vision")
                       for ref in wl["metadata"].get("ownerReferences", []))  # fmt: skip

    eventually(gone, "the page's job to be gone", 90)
    env = {**os.environ, "PATH": f"{Path(metal_twin.binary).parent}:{os.environ['PATH']}"}
    member = ["--kubeconfig", str(metal_twin.kubeconfig), "--as-group", GROUP]
    for line in quoted:
        argv = [sys.executable, "-m", *shlex.split(line), *member]
        done = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        if line.startswith("invoke why"):  # the page's job is not submitted in this test
            assert done.returncode == 2 and "no job or Workload named 'train-h100'" in done.stderr, (
                done.stderr
            )
        else:
            assert done.returncode == 0, (line, done.stderr)
            assert done.stdout.startswith("namespace vision:"), done.stdout
