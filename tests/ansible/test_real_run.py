"""A real run of playbooks/gpu-hosts.yml against a throwaway Debian 12 root (community.general.chroot).

Converge, then a second run that must change nothing, then checks on files and package state. NVIDIA's
repositories are replaced by signed local stub repositories; Debian's own non-free driver is real.
Tasks tagged needs_kernel / needs_systemd are skipped (no running kernel or systemd in a chroot).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import pytest

from tests.ansible import debroot, stubrepo
from tests.ansible.realrun import (
    DRIVER_PACKAGES,
    STUB,
    TOOLKIT_PACKAGES,
    TOOLKIT_VERSION,
    Run,
    Target,
    gpu_host,
    remove_root,
    run_playbook,
    write_inventory,
)

# One converge per test run: with pytest-xdist, `--dist loadgroup` keeps these tests on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ansible-real-run")]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, ansible_env: dict[str, str]) -> Iterator[Target]:
    if os.geteuid() != 0:
        pytest.fail(
            "the real Ansible run needs root (debootstrap, chroot, mount); run the Ansible tests as root"
        )
    work = tmp_path_factory.mktemp("gpu-host")
    started = time.monotonic()
    try:
        with gpu_host(work) as host:
            inventory = write_inventory(host.root, work / "inventory.yml")
            host.converge = run_playbook(inventory, ansible_env)
            ok = host.converge.returncode == 0
            host.again = run_playbook(inventory, ansible_env) if ok else host.converge
            print(
                f"\nreal run: converge {host.converge.seconds:.1f}s, second run {host.again.seconds:.1f}s, "
                f"total with setup {time.monotonic() - started:.1f}s"
            )
            yield host
    except (debroot.HostToolMissing, debroot.RootBuildFailed) as missing:
        pytest.fail(str(missing))
    finally:
        remove_root(work)


def converge(target: Target) -> Run:
    assert target.converge is not None
    return target.converge


def again(target: Target) -> Run:
    assert target.again is not None
    return target.again


def test_converge_succeeds_and_changes_the_host(target: Target) -> None:
    assert converge(target).returncode == 0, converge(target).output[-5000:]
    recap = converge(target).recap()
    assert recap["failed"] == 0 and recap["unreachable"] == 0
    assert recap["changed"] > 5


def test_second_run_changes_nothing(target: Target) -> None:
    assert again(target).returncode == 0, again(target).output[-5000:]
    assert again(target).recap()["changed"] == 0, again(target).output[-5000:]


def test_kernel_and_systemd_tasks_are_skipped_by_tag(target: Target) -> None:
    for task in (
        "Reboot to load the new driver",
        "Load the nvidia module",
        "Enable nvidia-persistenced",
        "Query the GPUs",
        "Install headers for the running kernel",
        "Generate the CDI specification",
        "Read the Secure Boot state",
        "Enable and start Fabric Manager",
    ):
        assert f"{task}]" not in converge(target).output
    # Handlers ignore --skip-tags; the restart handler checks the tag itself.
    handler = re.search(
        r"RUNNING HANDLER \[nvidia_container_toolkit : Restart the container runtime\] \**\n(\w+)",
        converge(target).output,
    )
    assert handler and handler.group(1) == "skipping"
    assert not (target.root / "etc/cdi/nvidia.yaml").exists()


def test_debian_driver_branch_is_installed_pinned_and_held(target: Target) -> None:
    packages = target.dpkg(*DRIVER_PACKAGES)
    assert sorted(packages) == sorted(DRIVER_PACKAGES)
    for name, (version, status) in packages.items():
        assert version.startswith("535."), (name, version)
        assert status == "hold ok installed", (name, status)
    assert "Pin: version 535.*" in target.read("/etc/apt/preferences.d/gpufleet-nvidia-driver.pref")
    sources = target.read("/etc/apt/sources.list.d/gpufleet-nvidia-driver.sources")
    assert "Components: contrib non-free non-free-firmware" in sources
    assert "Suites: bookworm" in sources


def test_nouveau_is_blacklisted(target: Target) -> None:
    assert "blacklist nouveau" in target.read("/etc/modprobe.d/gpufleet-blacklist-nouveau.conf").splitlines()
    assert "options nouveau modeset=0" in target.read("/etc/modprobe.d/gpufleet-nouveau-modeset.conf")


def test_toolkit_is_installed_at_the_pinned_version_not_the_newest(target: Target) -> None:
    packages = target.dpkg(*TOOLKIT_PACKAGES)
    assert packages == {name: (f"{TOOLKIT_VERSION}-1", "hold ok installed") for name in TOOLKIT_PACKAGES}


def test_repositories_use_a_keyring_and_signed_by(target: Target) -> None:
    keyring = "/etc/apt/keyrings/gpufleet-nvidia-container-toolkit.asc"
    sources = target.read("/etc/apt/sources.list.d/gpufleet-nvidia-container-toolkit.sources")
    assert f"Signed-By: {keyring}" in sources
    assert target.read(keyring) == target.read(f"{STUB}/toolkit/gpgkey")
    assert not (target.root / "etc/apt/trusted.gpg").exists()  # nothing went through apt-key


def test_nvidia_runtime_is_registered_once(target: Target) -> None:
    calls = target.read(stubrepo.NVIDIA_CTK_LOG).splitlines()
    assert calls == ["runtime configure --runtime=containerd --config=/etc/containerd/config.toml"]
    config = target.read("/etc/containerd/config.toml")
    assert config.count("containerd.runtimes.nvidia]") == 1


def test_fabricmanager_matches_the_driver_version(target: Target) -> None:
    packages = target.dpkg("nvidia-fabricmanager-535")
    assert packages == {"nvidia-fabricmanager-535": (target.driver_version, "hold ok installed")}
    assert f"Pin: version {target.driver_version}" in target.read(
        "/etc/apt/preferences.d/gpufleet-00-nvidia-fabricmanager.pref"
    )
