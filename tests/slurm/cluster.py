"""The tests' handle on the Slurm twin (`twin.slurm`): Debian's packages installed when missing (as root,
like the Ansible tier's debootstrap), and a missing prerequisite failing under CI=true."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from twin.slurm import PACKAGES, SlurmCluster, slurm_cluster, slurm_path

__all__ = ["SlurmCluster", "ensure_packages", "fail_or_skip", "slurm_cluster"]


def fail_or_skip(why: str) -> None:
    """A missing prerequisite fails under CI=true (the tier must run there), skips on a laptop."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


def ensure_packages() -> None:
    """Install Debian's Slurm, munge and MariaDB with apt-get when missing and running as root (like the Ansible
    tier's debootstrap); otherwise say what to install."""
    missing = sorted({pkg for tool, pkg in PACKAGES.items() if shutil.which(tool, path=slurm_path()) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        fail_or_skip(
            f"the real Slurm tests need root and Debian packages: apt-get install {' '.join(missing)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
    if subprocess.run([*argv, *missing], env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True)
        subprocess.run([*argv, *missing], env=env, check=True, capture_output=True)
