"""The real run of playbooks/gpu-hosts.yml against a throwaway Debian 12 root, shared by the test and
benchmarks/ansible_run.py: build the root (cached debootstrap tarball), add the signed stub repositories,
mount /proc, write the inventory (rendered by infra.metal_inventory), run the playbook over
community.general.chroot with the kernel/systemd tags skipped.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.metal_inventory import render_inventory
from tests.ansible import debroot, stubrepo
from tests.ansible.support import ANSIBLE_DIR, venv_tool

TOOLKIT_VERSION = "1.17.8"
TOOLKIT_PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
DRIVER_PACKAGES = [
    "nvidia-open-kernel-dkms",
    "firmware-nvidia-gsp",
    "nvidia-smi",
    "nvidia-persistenced",
    "libcuda1",
]
STUB = "/srv/gpufleet-stub"
# Build the root in memory when at least this much is available (it grows to about 1.5 GiB).
TMPFS_MIN_GIB = 6
_RECAP = re.compile(r"^\S+\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


@dataclass
class Run:
    returncode: int
    output: str
    seconds: float

    def recap(self) -> dict[str, int]:
        found = _RECAP.search(self.output)
        assert found, f"no play recap in output:\n{self.output[-3000:]}"
        return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, found.groups()), strict=True))


@dataclass
class Target:
    root: Path
    driver_version: str  # Debian's package version, e.g. "535.261.03-1"
    converge: Run | None = None
    again: Run | None = None

    def dpkg(self, *packages: str) -> dict[str, tuple[str, str]]:
        """package -> (version, status) inside the root."""
        done = subprocess.run(
            [
                "chroot",
                str(self.root),
                "dpkg-query",
                "--show",
                "--showformat=${Package}\t${Version}\t${Status}\n",
                *packages,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        rows = (line.split("\t") for line in done.stdout.splitlines() if line)
        return {name: (version, status) for name, version, status in rows}

    def read(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text()


def run_playbook(inventory: Path, env: dict[str, str]) -> Run:
    start = time.monotonic()
    done = subprocess.run(
        [
            venv_tool("ansible-playbook"),
            "-i",
            str(inventory),
            str(ANSIBLE_DIR / "playbooks/gpu-hosts.yml"),
            "--skip-tags",
            "needs_kernel,needs_systemd",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return Run(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def write_inventory(root: Path, path: Path) -> Path:
    inventory = render_inventory(
        [{"name": "gpu-test", "hosts": [str(root)], "gpuModel": "l40s", "gpusPerNode": 1}],
        driver_branch="535",
        toolkit_version=TOOLKIT_VERSION,
        fabricmanager=True,
    )
    inventory["gpu_hosts"]["vars"].update(
        {
            "ansible_connection": "community.general.chroot",
            "ansible_python_interpreter": "/usr/bin/python3",
            "nvidia_container_toolkit_repo_url": f"file://{STUB}/toolkit",
            "nvidia_fabricmanager_repo_url": f"file://{STUB}/fabricmanager",
            "nvidia_container_toolkit_cdi_enabled": True,
        }
    )
    path.write_text(yaml.safe_dump(inventory))
    return path


def _memory_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


@contextmanager
def gpu_host(work: Path) -> Iterator[Target]:
    """A fresh Debian 12 root under work/root with the stub repositories, /proc mounted while in use.

    The root lives on a tmpfs when the machine has the memory (dpkg's fsyncs and deleting ~1 GB of files
    cost more than the run itself on a busy disk); it is unmounted on exit.
    """
    tarball, facts = debroot.root_tarball()
    root = work / "root"
    root.mkdir(parents=True)
    in_memory = _memory_available_gib() >= TMPFS_MIN_GIB
    if in_memory:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4g,mode=0755", "gpufleet-root", str(root)], check=True
        )
    try:
        debroot.extract(tarball, root)
        policy = root / "usr/sbin/policy-rc.d"  # never start services inside the root
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        stubrepo.build(
            root / STUB.lstrip("/"),
            [f"{TOOLKIT_VERSION}-1", "1.18.0-1"],
            ("535", [facts["driver_version"], "535.999.01-1"]),
        )
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
        try:
            yield Target(root, facts["driver_version"])
        finally:
            subprocess.run(["umount", str(root / "proc")], check=False)
    finally:
        if in_memory:
            subprocess.run(["umount", str(root)], check=False)


def remove_root(work: Path) -> None:
    """Delete a used root (never crossing into a /proc left mounted)."""
    debroot.remove_tree(work)
