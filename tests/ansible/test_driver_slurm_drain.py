"""nvidia_driver on a Slurm GPU host (`invoke metal --reboot` on a Slurm stack): a driver change under a loaded
module drains the host's Slurm node the Slurm way first (scontrol drain, its running jobs finish), and once the
host is verified the play resumes the node; a node an admin drained keeps its reason and stays drained. The
role's task files run on this machine against the Slurm twin's real slurmctld (`scontrol`, `squeue` with its
SLURM_CONF), the module version faked as in test_driver_change.py."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ansible.support import ANSIBLE_DIR, run_local_play
from tests.slurm.cluster import SlurmCluster, ensure_packages, slurm_cluster
from tests.slurm.daemon_stack import daemon_stack
from twin.slurm import slurm_path

pytestmark = pytest.mark.xdist_group("slurm")
ROLE = ANSIBLE_DIR / "roles/nvidia_driver"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    ensure_packages()
    root = tmp_path_factory.mktemp("drv")
    with slurm_cluster(daemon_stack(root), root / "cluster") as running:
        assert running.script is not None
        running.run("sh", str(running.script))
        running.run("sacctmgr", "-i", "add", "user", "root", "account=vision,nlp", check=False)
        yield running


def _play(
    tmp_path: Path, env: dict[str, str], cluster: SlurmCluster, node: str, tasks_from: str
) -> subprocess.CompletedProcess[str]:
    modules = tmp_path / f"sys-module-{tasks_from}"
    (modules / "nvidia").mkdir(parents=True, exist_ok=True)
    (modules / "nvidia/version").write_text("580.95.05\n")
    include = {
        "ansible.builtin.include_role": {"name": str(ROLE), "tasks_from": tasks_from},
        "vars": {
            "nvidia_driver__module_root": str(modules),
            "nvidia_driver__local_connections": [],
            "nvidia_driver__version_before": "580.95.05",
            "nvidia_driver__version_target": "580.105.08",
            "nvidia_driver_reboot_allowed": True,
            "nvidia_driver_drain_enabled": True,
            "nvidia_driver_drain_scheduler": "slurm",
            "nvidia_driver_drain_node_name": node,
            "nvidia_driver_continue_command": "invoke metal --stack metal-slurm --reboot",
        },
    }
    show = {
        "ansible.builtin.debug": {"msg": "slurm_drained={{ nvidia_driver_slurm_drained | default(false) }}"}
    }
    slurm_env = {**env, "SLURM_CONF": cluster.env["SLURM_CONF"], "PATH": env["PATH"] + ":" + slurm_path()}
    return run_local_play(tmp_path / f"{tasks_from}-{node}.yml", {"tasks": [include, show]}, slurm_env)


def _node(cluster: SlurmCluster, name: str) -> str:
    return cluster.run("scontrol", "-o", "show", "node", name)


def test_a_driver_change_drains_the_slurm_node_waits_for_its_job_and_the_play_resumes_it(
    tmp_path: Path, ansible_env: dict[str, str], cluster: SlurmCluster
) -> None:
    """upgrade-gate.yml with a loaded module of another version and reboots allowed: gpu-h100-01 is drained with
    the driver's reason while vision's job runs on it, the gate returns only once the job completed (not
    killed: slurmctld would kill it and set the node DOWN on an unexpected reboot), and resume-slurm.yml (the
    play's post-task after gpu_node_verify) brings the node back idle."""
    job = cluster.sbatch("--account=vision", "--gres=gpu:h100:1", "-p", "h100", "-w", "gpu-h100-01",
                         script="sleep 12")  # fmt: skip
    cluster.wait_state(job, "RUNNING")
    started = time.monotonic()
    gate = _play(tmp_path, ansible_env, cluster, "gpu-h100-01", "upgrade-gate.yml")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "slurm_drained=True" in gate.stdout
    assert cluster.job(job)["JobState"] == "COMPLETED" and time.monotonic() - started >= 5, cluster.job(job)
    node = _node(cluster, "gpu-h100-01")
    assert "DRAIN" in node and "Reason=gpufleet: NVIDIA driver change [" in node, node
    resumed = _play(tmp_path, ansible_env, cluster, "gpu-h100-01", "resume-slurm.yml")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    cluster.wait("gpu-h100-01 idle", lambda: "State=IDLE " in _node(cluster, "gpu-h100-01"))


def test_a_node_an_admin_drained_keeps_its_reason(
    tmp_path: Path, ansible_env: dict[str, str], cluster: SlurmCluster
) -> None:
    cluster.run("scontrol", "update", "NodeName=gpu-h100-02", "State=DRAIN", "Reason=bad GPU, RMA")
    gate = _play(tmp_path, ansible_env, cluster, "gpu-h100-02", "upgrade-gate.yml")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "slurm_drained=False" in gate.stdout
    assert "Reason=bad GPU, RMA [" in _node(cluster, "gpu-h100-02")
    cluster.run("scontrol", "update", "NodeName=gpu-h100-02", "State=RESUME")
