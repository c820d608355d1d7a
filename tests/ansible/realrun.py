"""The real run of playbooks/gpu-hosts.yml against a throwaway Debian 12 root, shared by the test and
benchmarks/ansible_run.py: build the root (cached debootstrap tarball), add the signed stub repositories,
mount /proc, write the inventory (rendered by infra.metal.inventory), run the playbook over
community.general.chroot with the kernel/systemd tags skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from infra.metal.inventory import render_inventory
from tests.ansible import debroot, stubrepo
from tests.ansible.support import ANSIBLE_DIR, venv_tool

TOOLKIT_VERSION = "1.20.0"  # the versions recipe's pin; the stub repository also offers a newer one
DRIVER_VERSION = "580.95.05"  # the versions recipe's pin
NEWER_DRIVER_VERSION = (
    "580.105.08"  # offered by the stub repository from the start; the upgrade run asks for it
)
TOOLKIT_PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
DRIVER_PACKAGES = [
    "nvidia-driver-cuda",
    "nvidia-kernel-open-dkms",
    "firmware-nvidia-gsp",
    "nvidia-smi",
    "nvidia-persistenced",
    "libcuda1",
]
FABRICMANAGER_PACKAGES = ["nvidia-fabricmanager", "libnvidia-nscq"]
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
    key_fingerprint: str  # of the stub repositories' signing key
    runs: dict[str, Run] = field(default_factory=dict)
    snapshot: dict[str, tuple[str, str]] = field(default_factory=dict)  # packages after the second run
    saved: dict[str, str] = field(default_factory=dict)  # files after the second run

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


def run_playbook(
    inventory: Path,
    env: dict[str, str],
    skip_tags: str = "needs_kernel,needs_systemd",
    extra_vars: dict[str, object] | None = None,
) -> Run:
    start = time.monotonic()
    extra = ["-e", json.dumps(extra_vars)] if extra_vars else []
    done = subprocess.run(
        [
            venv_tool("ansible-playbook"),
            "-i",
            str(inventory),
            str(ANSIBLE_DIR / "playbooks/gpu-hosts.yml"),
            "--skip-tags",
            skip_tags,
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return Run(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def write_inventory(target: Target, path: Path, driver_version: str = DRIVER_VERSION) -> Path:
    inventory = render_inventory(
        [{"name": "gpu-test", "hosts": [str(target.root)], "gpuModel": "l40s", "gpusPerNode": 1}],
        driver_branch="580",
        toolkit_version=TOOLKIT_VERSION,
        fabricmanager=True,
        driver_version=driver_version,
    )
    inventory["gpu_hosts"]["vars"].update(
        {
            "ansible_connection": "community.general.chroot",
            "ansible_python_interpreter": "/usr/bin/python3",
            # NVIDIA's repositories, served from the root; the same URL the cuda-keyring entry lists.
            "nvidia_driver_repo_url": f"file://{STUB}/cuda/",
            "nvidia_driver_repo_key_url": f"file://{STUB}/cuda/gpgkey",
            "nvidia_driver_repo_key_fingerprint": target.key_fingerprint,
            "nvidia_fabricmanager_repo_key_fingerprint": target.key_fingerprint,
            "nvidia_container_toolkit_repo_url": f"file://{STUB}/toolkit",
            "nvidia_container_toolkit_repo_key_fingerprint": target.key_fingerprint,
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
    tarball, _ = debroot.root_tarball()
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
        fingerprint = stubrepo.build(
            root / STUB.lstrip("/"),
            [f"{TOOLKIT_VERSION}-1", "1.21.0-1"],
            [f"{DRIVER_VERSION}-1", f"{NEWER_DRIVER_VERSION}-1"],
        )
        _like_an_existing_gpu_host(root)
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
        try:
            yield Target(root, fingerprint)
        finally:
            subprocess.run(["umount", str(root / "proc")], check=False)
    finally:
        if in_memory:
            subprocess.run(["umount", str(root)], check=False)


def _like_an_existing_gpu_host(root: Path) -> None:
    """What most GPU hosts already have before gpufleet runs: NVIDIA's cuda-keyring entry for the CUDA
    repository (with its index fetched), a container runtime, and a fresh system apt index."""
    keyring = root / stubrepo.CUDA_KEYRING.lstrip("/")
    keyring.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / STUB.lstrip("/") / "cuda/keyring.gpg", keyring)
    entry = root / stubrepo.CUDA_KEYRING_LIST.lstrip("/")
    entry.write_text(f"deb [signed-by={stubrepo.CUDA_KEYRING}] file://{STUB}/cuda/ /\n")
    subprocess.run(
        [
            "chroot",
            str(root),
            "apt-get",
            "update",
            "-qq",
            "-o",
            f"Dir::Etc::SourceList={stubrepo.CUDA_KEYRING_LIST}",
            "-o",
            "Dir::Etc::SourceParts=-",
            "-o",
            "APT::Get::List-Cleanup=0",
        ],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
    )
    # containerd 1.7 as Debian-based Kubernetes nodes run it (`containerd --version` format of the upstream
    # release binaries); the roles only ask it for its version.
    containerd = root / "usr/bin/containerd"
    containerd.write_text(
        "#!/bin/sh\necho 'containerd github.com/containerd/containerd v1.7.27 05044ec0a9a7'\n"
    )
    containerd.chmod(0o755)
    stamp = root / "var/lib/apt/periodic/update-success-stamp"
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()


@contextmanager
def stub_modprobe(target: Target) -> Iterator[None]:
    """Swap the root's modprobe for stubrepo.MODPROBE for one run; unload (remove from sysfs) afterwards.

    /proc is a small tmpfs during the run: community.general.modprobe reads /proc/modules (and the running
    kernel's modules.builtin), which a chroot shares with the build machine (and which some sandboxed
    kernels do not have); the stub adds its line.
    """
    real = target.root / "usr/sbin/modprobe"
    aside = real.with_name("modprobe.real")
    proc = target.root / "proc"
    real.rename(aside)
    real.write_text(stubrepo.MODPROBE)
    real.chmod(0o755)
    subprocess.run(["umount", str(proc)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "gpufleet-proc", str(proc)], check=True)
    (proc / "modules").write_text("")
    # The running kernel's module directory, which a real host has and the root (built for no kernel) lacks.
    kernel_modules = target.root / "lib/modules" / os.uname().release
    kernel_modules.mkdir(parents=True, exist_ok=True)
    (kernel_modules / "modules.builtin").write_text("")
    try:
        yield
    finally:
        subprocess.run(["umount", str(proc)], check=False)
        subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True)
        real.unlink()
        aside.rename(real)
        shutil.rmtree(kernel_modules, ignore_errors=True)
        for module in ("nvidia", "nvidia-peermem", "nvidia-uvm", "nvidia-modeset"):
            shutil.rmtree(target.root / "sys/module" / module, ignore_errors=True)


def remove_root(work: Path) -> None:
    """Delete a used root (never crossing into a /proc left mounted)."""
    debroot.remove_tree(work)
