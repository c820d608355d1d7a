"""The tests' handle on the Slurm twin (`twin.slurm`): Debian's packages installed when missing (as root,
like the Ansible tier's debootstrap), and a missing prerequisite failing under CI=true."""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.support import require
from twin.slurm import SlurmCluster, missing_packages, slurm_cluster

__all__ = ["SlurmCluster", "ensure_packages", "slurm_cluster"]


def ensure_packages() -> None:
    """Install Debian's Slurm, munge and MariaDB with apt-get when missing and running as root (like the Ansible
    tier's debootstrap); otherwise say what to install."""
    missing = missing_packages()
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        require(f"the real Slurm tests need root and Debian packages: apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
    if subprocess.run([*argv, *missing], env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True)
        subprocess.run([*argv, *missing], env=env, check=True, capture_output=True)
