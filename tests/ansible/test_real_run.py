"""A real run of playbooks/gpu-hosts.yml against a throwaway Debian 12 root (community.general.chroot).

One root serves the whole module: converge, a second run that must change nothing, a run with a reboot
pending (nouveau "loaded") and no permission to reboot, an upgrade run to a newer driver, and the run
after it (changed=0). NVIDIA's repositories are replaced by signed local stub repositories that model
today's packaging (stubrepo.py: 580-style Fabric Manager names, a toolkit that writes drop-ins, the entry
NVIDIA's cuda-keyring package leaves). Tasks tagged needs_kernel / needs_systemd are skipped (no running
kernel or systemd in a chroot), except in the pending-reboot run, which runs the kernel tasks.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ansible import debroot, stubrepo
from tests.ansible.realrun import (
    DRIVER_PACKAGES,
    DRIVER_VERSION,
    FABRICMANAGER_PACKAGES,
    NEWER_DRIVER_VERSION,
    STUB,
    TOOLKIT_PACKAGES,
    TOOLKIT_VERSION,
    Run,
    Target,
    gpu_host,
    remove_root,
    run_playbook,
    stub_modprobe,
    write_inventory,
)

PINS = (
    "/etc/apt/preferences.d/gpufleet-nvidia-driver.pref",
    "/etc/apt/preferences.d/gpufleet-00-nvidia-fabricmanager.pref",
)
# One root per test run: with pytest-xdist, `--dist loadgroup` keeps these tests on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ansible-gpu-roles")]


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
            inventory = write_inventory(host, work / "inventory.yml")
            host.runs["converge"] = run_playbook(inventory, ansible_env)
            if host.runs["converge"].returncode == 0:
                host.runs["again"] = run_playbook(inventory, ansible_env)
                host.snapshot = host.dpkg(*DRIVER_PACKAGES, *FABRICMANAGER_PACKAGES)
                host.saved = {path: host.read(path) for path in PINS}
                # A fresh host: neither nvidia nor nouveau loaded; the kernel tasks run (modprobe is a stub).
                # It is an NVSwitch host (two NVSwitch PCI functions in sysfs) whose fabric registered, and it
                # sets one NVreg_ option.
                switches = _fake_nvswitches(host)
                with stub_modprobe(host):
                    host.runs["fresh"] = run_playbook(
                        inventory,
                        ansible_env,
                        skip_tags="needs_systemd",
                        extra_vars={
                            "nvidia_driver_install_headers": False,
                            "nvidia_driver_module_options": {"NVreg_EnableStreamMemOPs": True},
                        },
                    )
                host.saved["modprobe-options"] = host.read(MODULE_OPTIONS)
                for path in switches:
                    path.unlink()
                host.saved["ctk-calls"] = host.read(stubrepo.NVIDIA_CTK_LOG)
                # nouveau holds the GPUs (a fresh host before its first reboot); the chroot cannot reboot.
                nouveau = host.root / "sys/module/nouveau"
                nouveau.mkdir(parents=True)
                host.runs["pending"] = run_playbook(
                    inventory,
                    ansible_env,
                    skip_tags="needs_systemd",
                    extra_vars={"nvidia_driver_install_headers": False},
                )
                nouveau.rmdir()
                upgraded = write_inventory(host, work / "upgrade.yml", driver_version=NEWER_DRIVER_VERSION)
                host.runs["upgrade"] = run_playbook(upgraded, ansible_env)
                host.runs["after-upgrade"] = run_playbook(upgraded, ansible_env)
                host.runs["bad-key"] = run_playbook(
                    upgraded,
                    ansible_env,
                    extra_vars={"nvidia_container_toolkit_repo_key_fingerprint": "0" * 40},
                )
            print(
                "\nreal run: "
                + ", ".join(f"{name} {run.seconds:.1f}s" for name, run in host.runs.items())
                + f", total with setup {time.monotonic() - started:.1f}s"
            )
            yield host
    except (debroot.HostToolMissing, debroot.RootBuildFailed) as missing:
        pytest.fail(str(missing))
    finally:
        remove_root(work)


MODULE_OPTIONS = "/etc/modprobe.d/nvidia-gpufleet.conf"


def _fake_nvswitches(host: Target) -> list[Path]:
    """sysfs of an HGX board as nvidia_fabricmanager reads it: NVSwitches are PCI bridges (class 0x068000)
    with NVIDIA's vendor id 0x10de; the stub nvidia-smi reports the fabric as registered."""
    written = []
    for bus in ("0000:05:00.0", "0000:06:00.0"):
        device = host.root / "sys/bus/pci/devices" / bus
        device.mkdir(parents=True, exist_ok=True)
        for name, value in (("vendor", "0x10de"), ("class", "0x068000")):
            (device / name).write_text(value + "\n")
            written.append(device / name)
    fabric = host.root / stubrepo.NVIDIA_SMI_FABRIC.lstrip("/")
    fabric.parent.mkdir(parents=True, exist_ok=True)
    fabric.write_text("Completed\nSuccess\n")
    return [*written, fabric]


def run(target: Target, name: str) -> Run:
    converge = target.runs["converge"]
    assert converge.returncode == 0, converge.output[-6000:]
    return target.runs[name]


def test_converge_succeeds_and_changes_the_host(target: Target) -> None:
    recap = run(target, "converge").recap()
    assert recap["failed"] == 0 and recap["unreachable"] == 0
    assert recap["changed"] > 5


def test_second_run_changes_nothing(target: Target) -> None:
    again = run(target, "again")
    assert again.returncode == 0, again.output[-5000:]
    assert again.recap()["changed"] == 0, again.output[-5000:]


def test_kernel_and_systemd_tasks_are_skipped_by_tag(target: Target) -> None:
    output = run(target, "converge").output
    for task in (
        "Reboot to load the new driver",
        "Load the nvidia module",
        "Enable nvidia-persistenced",
        "Query the GPUs",
        "Install headers for the running kernel before the driver",
        "Generate the CDI specification",
        "Read the Secure Boot state",
        "Enable and start Fabric Manager",
    ):
        assert f"{task}]" not in output
    # Handlers ignore --skip-tags; the restart handler checks the tag itself.
    handler = re.search(
        r"RUNNING HANDLER \[nvidia_container_toolkit : Restart the container runtime\] \**\n(\w+)", output
    )
    assert handler and handler.group(1) == "skipping"


def test_pinned_driver_is_installed_from_nvidias_repository_and_every_package_held(target: Target) -> None:
    """The versions recipe's exact driver, not the newer one the repository also offers; every installed
    driver package held, not only the metapackages (NVIDIA driver installation guide, "Version locking")."""
    packages = target.snapshot
    for name in DRIVER_PACKAGES:
        assert packages[name] == (f"{DRIVER_VERSION}-1", "hold ok installed"), name
    pin = target.saved[PINS[0]]
    assert f"Pin: version {DRIVER_VERSION}-*" in pin
    assert "Pin: release o=Debian\nPin-Priority: -1" in pin  # one source: Debian's own driver never mixes in


def test_fabricmanager_uses_the_580_names_at_the_drivers_exact_version(target: Target) -> None:
    """From branch 580 Fabric Manager is `nvidia-fabricmanager` and NSCQ `libnvidia-nscq`, installed at the
    driver's exact version and held (gpu-driver-container ubuntu22.04/install.sh fabricmanager_install,
    nscq_install; rhel9/precompiled/Dockerfile for the branch switch at 580)."""
    packages = target.snapshot
    for name in FABRICMANAGER_PACKAGES:
        assert packages[name] == (f"{DRIVER_VERSION}-1", "hold ok installed"), name
    pin = target.saved[PINS[1]]
    assert f"Package: nvidia-fabricmanager\nPin: version {DRIVER_VERSION}-1" in pin


def test_existing_cuda_keyring_entry_is_reused_not_duplicated(target: Target) -> None:
    """A second entry for NVIDIA's repository with another Signed-By makes apt reject all sources; the host
    already lists it the way NVIDIA's cuda-keyring package does, so the roles add no entry of their own and
    keep its keyring (whose fingerprint they checked)."""
    assert not (target.root / "etc/apt/sources.list.d/gpufleet-nvidia-driver.sources").exists()
    assert not (target.root / "etc/apt/sources.list.d/gpufleet-nvidia-fabricmanager.sources").exists()
    assert f"signed-by={stubrepo.CUDA_KEYRING}" in target.read(stubrepo.CUDA_KEYRING_LIST)


def test_toolkit_repository_uses_nvidias_keyring_path_after_a_fingerprint_check(target: Target) -> None:
    """NVIDIA's install guide keeps the toolkit key at /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg."""
    keyring = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    sources = target.read("/etc/apt/sources.list.d/gpufleet-nvidia-container-toolkit.sources")
    assert f"Signed-By: {keyring}" in sources
    assert (target.root / keyring.lstrip("/")).read_bytes() == (
        target.root / f"{STUB}/cuda/keyring.gpg".lstrip("/")
    ).read_bytes()
    assert not (target.root / "etc/apt/trusted.gpg").exists()  # nothing went through apt-key


def test_wrong_key_fingerprint_is_refused(target: Target) -> None:
    """The key is checked by fingerprint before apt trusts it."""
    done = run(target, "bad-key")
    assert done.returncode != 0
    assert "expected 0000000000000000000000000000000000000000" in " ".join(done.output.split())
    assert done.recap()["changed"] == 0


def test_toolkit_is_installed_at_the_pinned_version_not_the_newest(target: Target) -> None:
    packages = target.dpkg(*TOOLKIT_PACKAGES)
    assert packages == {name: (f"{TOOLKIT_VERSION}-1", "hold ok installed") for name in TOOLKIT_PACKAGES}


def test_nvidia_runtime_is_registered_once_in_the_drop_in_with_cdi(target: Target) -> None:
    """Toolkit 1.18+ writes the runtime into /etc/containerd/conf.d/99-nvidia.toml and imports it; the role
    reads the drop-in, so the second run does not call nvidia-ctk again (nvidia-container-toolkit v1.20.0,
    cmd/nvidia-ctk/runtime/configure/configure.go). CDI is enabled for containerd 1.7 (off by default there)."""
    calls = [line for line in target.read(stubrepo.NVIDIA_CTK_LOG).splitlines() if line.startswith("runtime")]
    assert calls == [
        "runtime configure --runtime=containerd --config=/etc/containerd/config.toml --nvidia-runtime-name=nvidia "
        "--drop-in-config=/etc/containerd/conf.d/99-nvidia.toml --enable-cdi"
    ]
    dropin = target.read("/etc/containerd/conf.d/99-nvidia.toml")
    assert "containerd.runtimes.nvidia]" in dropin and "enable_cdi = true" in dropin


def test_unprivileged_containers_cannot_select_gpus_by_environment(target: Target) -> None:
    """`accept-nvidia-visible-devices-envvar-when-unprivileged` is a top-level key of
    /etc/nvidia-container-runtime/config.toml, true by default (nvidia-container-toolkit v1.20.0,
    api/config/v1/config.go GetDefault); the role sets it false in place of the commented default."""
    config = target.read("/etc/nvidia-container-runtime/config.toml").splitlines()
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in config
    assert not any(
        line.startswith("#accept-nvidia-visible-devices-envvar-when-unprivileged") for line in config
    )
    assert config.index("accept-nvidia-visible-devices-envvar-when-unprivileged = false") < config.index(
        "[nvidia-container-cli]"
    )


def test_persistence_mode_override_and_nouveau_blacklist(target: Target) -> None:
    """The packaged unit starts the daemon with --no-persistence-mode; the override NVIDIA's driver role
    ships (files/nvidia-persistenced-override.conf) replaces ExecStart."""
    override = target.read("/etc/systemd/system/nvidia-persistenced.service.d/gpufleet-persistence-mode.conf")
    assert "ExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user root --persistence-mode" in override
    assert "blacklist nouveau" in target.read("/etc/modprobe.d/gpufleet-blacklist-nouveau.conf").splitlines()


def test_pending_reboot_without_permission_fails_once_and_runs_nothing_that_needs_the_driver(
    target: Target,
) -> None:
    pending = run(target, "pending")
    assert pending.returncode != 0
    assert pending.recap()["failed"] == 1
    assert "reboot pending on" in pending.output
    assert "Continue with: ansible-playbook playbooks/gpu-hosts.yml -e nvidia_driver_reboot_allowed=true" in (
        " ".join(pending.output.split())
    )
    for task in ("Generate the CDI specification", "Query the GPUs", "Load the nvidia module"):
        found = re.search(rf"TASK \[[^\]]*{re.escape(task)}\] \**\n(\w+)", pending.output)
        assert found is None or found.group(1) == "skipping", task
    for task in ("Cordon and drain the Kubernetes node", "Reboot to load the new driver"):
        found = re.search(rf"TASK \[[^\]]*{re.escape(task)}\] \**\n(\w+)", pending.output)
        assert found and found.group(1) == "skipping", task
    calls_after = target.read(stubrepo.NVIDIA_CTK_LOG)[len(target.saved["ctk-calls"]) :]
    assert "cdi generate" not in calls_after


def test_fresh_host_loads_the_module_instead_of_demanding_a_reboot(target: Target) -> None:
    """With neither nvidia nor nouveau loaded nothing holds the GPUs, so the new module is loaded and the
    steps that need the driver run: the CDI specification is generated and gpu_node_verify passes."""
    fresh = run(target, "fresh")
    assert fresh.returncode == 0, fresh.output[-6000:]
    assert target.read(stubrepo.MODPROBE_LOG).split("\n")[0] == "nvidia"
    assert "reboot pending" not in fresh.output
    # community.general.modprobe reports "changed" from /proc/modules, the build machine's in a chroot.
    for task, status in (
        ("Load the nvidia module", ("ok", "changed")),
        ("Generate the CDI specification", ("changed",)),
    ):
        found = re.search(rf"TASK \[[^\]]*{re.escape(task)}\] \**\n(\w+)", fresh.output)
        assert found and found.group(1) in status, task
    found = re.search(r"TASK \[gpu_node_verify : Query the GPUs\] \**\n(\w+)", fresh.output)
    assert found and found.group(1) == "ok"
    assert "cdi generate --output=/var/run/cdi/nvidia.yaml" in target.saved["ctk-calls"]


def test_fresh_host_loads_nvidia_uvm_and_modeset_now_and_at_boot(target: Target) -> None:
    """nvidia-ctk cdi generate omits a missing /dev/nvidia-uvm (toolkit v1.20.0
    internal/discover/mounts.go, pkg/nvcdi/common-nvml.go) and the GPU operator's validator loads no
    module once nvidia is loaded (gpu-operator cmd/nvidia-validator/main.go): the role loads nvidia-uvm and
    nvidia-modeset itself and lists them in modules-load.d."""
    run(target, "fresh")
    calls = target.read(stubrepo.MODPROBE_LOG).splitlines()
    assert "nvidia-uvm" in calls and "nvidia-modeset" in calls
    assert calls.index("nvidia") < calls.index("nvidia-uvm")
    listed = target.read("/etc/modules-load.d/gpufleet-nvidia.conf").split()
    assert {"nvidia", "nvidia-uvm", "nvidia-modeset"} <= set(listed)


def test_upgrade_moves_driver_and_fabricmanager_together_then_changes_nothing(target: Target) -> None:
    upgrade = run(target, "upgrade")
    assert upgrade.returncode == 0, upgrade.output[-6000:]
    assert f"Pin: version {NEWER_DRIVER_VERSION}-*" in target.read(PINS[0])
    assert f"Package: nvidia-fabricmanager\nPin: version {NEWER_DRIVER_VERSION}-1" in target.read(PINS[1])
    packages = target.dpkg(*DRIVER_PACKAGES, *FABRICMANAGER_PACKAGES)
    assert packages == {
        name: (f"{NEWER_DRIVER_VERSION}-1", "hold ok installed")
        for name in DRIVER_PACKAGES + FABRICMANAGER_PACKAGES
    }
    after = run(target, "after-upgrade")
    assert after.returncode == 0, after.output[-5000:]
    assert after.recap()["changed"] == 0, after.output[-5000:]


def test_nvswitch_host_checks_the_fabric_in_nvidia_smi_q(target: Target) -> None:
    """On an NVSwitch host gpu_node_verify reads the Fabric section of `nvidia-smi -q` (NVIDIA Fabric
    Manager user guide: State Completed, Status Success) and passes when it is registered; Fabric Manager's
    systemd state is asked under needs_systemd (skipped in the chroot)."""
    fresh = run(target, "fresh")
    assert fresh.returncode == 0, fresh.output[-6000:]
    found = re.search(r"TASK \[gpu_node_verify : Query the GPU fabric\] \**\n(\w+)", fresh.output)
    assert found and found.group(1) == "ok", fresh.output[-6000:]
    converge = run(target, "converge")
    found = re.search(r"TASK \[gpu_node_verify : Query the GPU fabric\] \**\n(\w+)", converge.output)
    assert found is None or found.group(1) == "skipping"


def test_module_options_are_written_to_modprobe_d(target: Target) -> None:
    """NVreg_* parameters go to modprobe.d as `options nvidia NVreg_X=value` (modprobe.d(5)), booleans
    as 1/0; with none set the file is removed again (the pending run sets none)."""
    run(target, "fresh")
    assert target.saved["modprobe-options"].splitlines()[1:] == ["options nvidia NVreg_EnableStreamMemOPs=1"]
    assert not (target.root / MODULE_OPTIONS.lstrip("/")).exists()


def test_gnupg_is_installed_on_a_root_that_shipped_only_gpgv(target: Target) -> None:
    """debootstrap minbase (like Ubuntu's minimal images) has gpgv but not gpg; the roles check
    repository keys with gpg, so they install gnupg first (Debian package gnupg: gpg, dirmngr, gpg-agent)."""
    run(target, "converge")
    assert debroot.PREFETCH == ("gnupg",) and "gpg" not in debroot.INCLUDE
    packages = target.dpkg("gnupg", "gpg")
    assert packages["gnupg"][1] == "install ok installed" or packages["gnupg"][1].endswith("ok installed")
    assert packages["gpg"][1].endswith("ok installed")
