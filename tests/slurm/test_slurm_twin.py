"""`invoke twin` for a Slurm stack (twin.slurm): the stack's Slurm cluster on real Debian 12 daemons on
loopback, its accounts applied, and `--run CMD` where sbatch/squeue reach its controller, as for Kubernetes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.slurm.cluster import ensure_packages
from tests.slurm.daemon_stack import daemon_stack, daemon_stack_file

pytestmark = pytest.mark.xdist_group("slurm")


def invoke(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUFLEET_TWIN_LOCK": str(tmp / "twin.lock")}
    return subprocess.run([sys.executable, "-m", "invoke", "twin", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_twin_run_submits_as_a_team_and_sees_the_stacks_partitions(tmp_path: Path) -> None:
    """The command runs with SLURM_CONF of the twin: sinfo lists the stack's partitions and hosts with their
    typed GRES (slurmd names the shards after their GPU type); a job under a team's account within its quota runs to completion and sacct records it with
    the account's GPUs; the command's exit status is the task's."""
    ensure_packages()
    daemon_stack(tmp_path)
    script = (
        "set -e; sinfo -h -N -o '%N %P %G' | sort; "
        "job=$(sbatch --parsable --account=vision --gres=gpu:h100:1 -p h100 --chdir /tmp --output /dev/null --wrap 'sleep 1'); "
        "for i in $(seq 60); do s=$(sacct -nXP -j $job --format=state,account,alloctres); "
        'case $s in COMPLETED*) echo "job $s"; exit 0;; esac; sleep 1; done; exit 9'
    )
    done = invoke(tmp_path, "--stack", str(daemon_stack_file(tmp_path)), "--run", script)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "gpu-h100-01 h100* gpu:h100:2" in lines and "gpu-l40s-01 l40s gpu:l40s:1,shard:l40s:2" in lines, (
        lines
    )
    job = next(line for line in lines if line.startswith("job "))
    assert "|vision|" in job and "gres/gpu:h100=1" in job, job
    failed = invoke(tmp_path, "--stack", str(daemon_stack_file(tmp_path)), "--run", "squeue -h; exit 7")
    assert failed.returncode == 7, failed.stdout + failed.stderr


def test_kubernetes_only_options_are_refused_for_a_slurm_stack(tmp_path: Path) -> None:
    """Bad input before anything starts: exit 2 naming the options."""
    daemon_stack(tmp_path)
    done = invoke(tmp_path, "--stack", str(daemon_stack_file(tmp_path)), "--monitoring", "--no-frameworks",
                  "--run", "true")  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "--monitoring" in done.stderr and "--no-frameworks" in done.stderr and "Traceback" not in done.stderr
    )


def test_the_docs_twin_example_runs_on_the_metal_slurm_stack(tmp_path: Path) -> None:
    """docs/slurm.md's `invoke twin --stack metal-slurm --run ...` as written: all seven hosts come up with
    their partitions and the example's job under vision is accepted and runs."""
    import re
    import shlex

    ensure_packages()
    text = (ROOT / "docs" / "slurm.md").read_text()
    block = re.search(r"```sh\n(invoke twin --stack metal-slurm --run .*?)\n```", text, re.S)
    assert block, "docs/slurm.md has no twin example"
    argv = shlex.split(block.group(1))
    assert argv[:4] == ["invoke", "twin", "--stack", "metal-slurm"] and argv[4] == "--run"
    done = invoke(
        tmp_path,
        "--stack",
        "metal-slurm",
        "--run",
        argv[5]
        + "; for i in $(seq 100); do sacct -nXP --format=state | grep -qE 'RUNNING|COMPLETED' && break;"
        " sleep 0.2; done; sacct -nXP --format=state,account",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "COMPLETED|vision" in done.stdout or "RUNNING|vision" in done.stdout, done.stdout
    partitions = {
        line.split()[0]: line.split()[3]
        for line in done.stdout.splitlines()
        if line.startswith(("h100", "l40s"))
    }
    assert partitions == {"h100*": "4", "l40s": "3"}, done.stdout  # sinfo's NODES column
