"""nvidia_driver: decisions of the driver tasks that a chroot cannot reach (Ubuntu's archive, RHEL's dnf
modules, a loaded module), checked on the role's own filter, task arguments and real Ansible runs of the
task files on this machine with a stub kubectl."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from tests.ansible.support import ANSIBLE_DIR, run_local_play

ROLE = ANSIBLE_DIR / "roles/nvidia_driver"
_spec = importlib.util.spec_from_file_location("driver_archive", ROLE / "filter_plugins/driver_archive.py")
assert _spec and _spec.loader
archive = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(archive)

# `apt-cache madison nvidia-utils-580-server` on Ubuntu 24.04 once Canonical moved the branch on: each
# pocket lists only its newest build (580.95.05 was published as 0ubuntu0.24.04.2 and left the index).
NOBLE_MADISON = (
    " nvidia-utils-580-server | 580.159.03-0ubuntu0.24.04.1 | http://archive.ubuntu.com/ubuntu "
    "noble-updates/restricted amd64 Packages\n"
    " nvidia-utils-580-server | 580.126.09-0ubuntu0.24.04.1 | http://security.ubuntu.com/ubuntu "
    "noble-security/restricted amd64 Packages\n"
    " nvidia-utils-580-server | 580.95.05-1 | https://developer.download.nvidia.com/compute/cuda/repos/"
    "ubuntu2404/x86_64  Packages\n"
)


def _tasks(name: str) -> list[dict]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def _flat(tasks: list[dict]) -> list[dict]:
    out: list[dict] = []
    for task in tasks:
        out.append(task)
        out += _flat(task.get("block", []))
    return out


def test_ubuntu_pin_resolves_to_a_build_the_pocket_still_carries() -> None:
    """Canonical's pockets index only the newest build of a package (a superseded build leaves
    noble-updates/noble-security), so `nvidia-utils-580-server=580.95.05-*` fails on a fresh host once the
    branch moved on; NVIDIA's CUDA repository keeps every build (gpu-driver-container ubuntu24.04/install.sh
    installs `=${DRIVER_VERSION}*` from it). The role picks only builds the archive offers, never NVIDIA's."""
    pick = archive.nvidia_driver_pick
    # Fresh host, pin gone from the archive: the pocket's newest build of the branch, not NVIDIA's 580.95.05.
    assert pick(NOBLE_MADISON, "", "580.95.05", "580", "at-least", "developer.download.nvidia.com") == {
        "version": "580.159.03",
        "error": "",
    }
    # An installed build of the branch not older than the pin stays (no change on a live node).
    assert (
        pick(NOBLE_MADISON, "580.126.09", "580.95.05", "580", "at-least", "developer.download.nvidia.com")[
            "version"
        ]
        == "580.126.09"
    )
    # While the archive still offers the pin, the pin.
    offered = " nvidia-utils-580-server | 580.95.05-0ubuntu0.24.04.2 | http://archive.ubuntu.com/ubuntu x\n"
    assert pick(offered, "", "580.95.05", "580", "at-least")["version"] == "580.95.05"
    # exact: a clear error naming what is offered, never the dropped build.
    strict = pick(NOBLE_MADISON, "", "580.95.05", "580", "exact", "developer.download.nvidia.com")
    assert strict["version"] == "" and "580.159.03, 580.126.09" in strict["error"]
    # Nothing new enough in the branch: an error, not an older build.
    older = " nvidia-utils-580-server | 580.82.07-0ubuntu1 | http://archive.ubuntu.com/ubuntu x\n"
    assert "nothing is 580.95.05 or newer" in pick(older, "", "580.95.05", "580", "at-least")["error"]
    assert "must be one of" in pick(NOBLE_MADISON, "", "580.95.05", "580", "newest")["error"]


def test_ubuntu_install_and_pin_use_the_resolved_build() -> None:
    """The install task and the pin file take the archive-resolved build (vars/Ubuntu.yml marks the
    archive as keeping one build), not the raw recipe pin."""
    assert "nvidia_driver__archive_keeps_one_build: true" in (ROLE / "vars/Ubuntu.yml").read_text()
    install = next(t for t in _flat(_tasks("install-apt.yml")) if t["name"] == "Install the driver packages")
    assert "nvidia_driver__version_target" in install["ansible.builtin.apt"]["name"]
    assert "nvidia_driver_version " not in install["ansible.builtin.apt"]["name"]
    pin = (ROLE / "templates/driver-pin.pref.j2").read_text()
    assert "nvidia_driver_version " not in pin and "Pin: version {{ nvidia_driver__version_target }}-*" in pin
    names = [t["name"] for t in _flat(_tasks("install-apt.yml"))]
    assert names.index("Resolve the driver build the distribution archive offers") < names.index(
        "Keep the distribution's and other sources' driver packages out, pin the version"
    )


def test_ubuntu_host_on_nvidias_cuda_repo_driver_is_recognised() -> None:
    """NVIDIA's CUDA repository ships the Ubuntu driver as nvidia-driver-<branch>-open /
    nvidia-utils-<branch> (gpu-driver-container ubuntu24.04/install.sh, NVIDIA driver installation guide),
    not the -server names; the role looks for them and stops instead of installing -server on top."""
    tasks = _tasks("archive-version.yml")
    query = tasks[0]["ansible.builtin.command"]["argv"]
    assert "nvidia_driver__other_flavour_packages" in query
    ubuntu = yaml.safe_load((ROLE / "vars/Ubuntu.yml").read_text())
    assert "nvidia-utils-{{ nvidia_driver_branch }}" in ubuntu["nvidia_driver__other_flavour_packages"]
    assert "nvidia-driver-{{ nvidia_driver_branch }}-open" in ubuntu["nvidia_driver__other_flavour_packages"]
    assert (
        tasks[1]["ansible.builtin.fail"] and "nothing was changed" in tasks[1]["ansible.builtin.fail"]["msg"]
    )


def test_rhel_enables_the_stream_and_installs_nvidias_versioned_compute_set() -> None:
    """ansible-core's dnf module installs a module's default profile for `@name:stream`
    (modules/dnf.py, module_base.install), the full driver at the newest build. NVIDIA's RHEL 9 driver
    container enables the stream and installs versioned names (NVIDIA/gpu-driver-container
    rhel9/precompiled/Dockerfile: `dnf -y module enable nvidia-driver:${STREAM}-open/default`, then
    nvidia-driver-cuda-, nvidia-driver-libs-, libnvidia-ml-, nvidia-persistenced-${DRIVER_VERSION};
    rhel9/install.sh: `dnf module enable -y nvidia-driver:${BRANCH}-dkms`)."""
    tasks = _flat(_tasks("install-dnf.yml"))
    for task in tasks:
        names = (task.get("ansible.builtin.dnf") or {}).get("name", "")
        assert not str(names).startswith("@"), f"{task['name']} installs a module profile"
    enable = next(t for t in tasks if t["name"] == "Enable the branch-locked module stream")
    assert enable["ansible.builtin.command"]["argv"][:3] == ["dnf", "module", "enable"]
    packages = yaml.safe_load((ROLE / "vars/RedHat.yml").read_text())["nvidia_driver__packages"]
    for flavour in ("open", "proprietary"):
        assert {"nvidia-driver-cuda", "nvidia-driver-libs", "libnvidia-ml", "nvidia-persistenced"} <= set(
            packages[flavour]
        )
    names = [t["name"] for t in tasks]
    assert names.index("Enable the branch-locked module stream") < names.index("Install the driver packages")


KUBECTL = """#!/bin/sh
echo "$*" >> "{log}"
case "$1" in
  get) {get} ;;
  *) exit 0 ;;
esac
"""


def _gate(
    tmp_path: Path,
    env: dict[str, str],
    *,
    loaded: str | None,
    before: str,
    target: str,
    reboot: bool,
    node: bool = True,
) -> tuple[int, str, list[str]]:
    """Run tasks/upgrade-gate.yml on this machine: a fake /sys/module, a stub kubectl that records calls."""
    modules = tmp_path / "sys-module"
    modules.mkdir()
    if loaded:
        (modules / "nvidia").mkdir()
        (modules / "nvidia/version").write_text(loaded + "\n")
    log = tmp_path / "kubectl.calls"
    log.touch()
    kubectl = tmp_path / "kubectl"
    found = (
        "echo node/$3"
        if node
        else 'echo "Error from server (NotFound): nodes \\"$3\\" not found" >&2; exit 1'
    )
    kubectl.write_text(KUBECTL.format(log=log, get=found))
    kubectl.chmod(0o755)
    include = {
        "ansible.builtin.include_role": {"name": str(ROLE), "tasks_from": "upgrade-gate.yml"},
        "vars": {
            "nvidia_driver__module_root": str(modules),
            "nvidia_driver__local_connections": [],
            "nvidia_driver__version_before": before,
            "nvidia_driver__version_target": target,
            "nvidia_driver_reboot_allowed": reboot,
            "nvidia_driver_drain_enabled": True,
            "nvidia_driver_drain_kubectl": str(kubectl),
            "nvidia_driver_continue_command": "invoke metal --stack metal --reboot",
        },
    }
    show = {"ansible.builtin.debug": {"msg": "drained={{ nvidia_driver_drained | default(false) }}"}}
    done = run_local_play(tmp_path / "gate.yml", {"tasks": [include, show]}, env)
    return done.returncode, done.stdout + done.stderr, log.read_text().splitlines()


def test_driver_change_under_a_loaded_module_is_refused_without_reboot(
    tmp_path: Path, ansible_env: dict[str, str]
) -> None:
    """New userspace next to a loaded module of another version gives "Driver/library version
    mismatch" for every new GPU container until the reboot (NVIDIA/deepops#1186): the role stops before any
    package changes when it may not reboot, and says how to continue."""
    rc, output, calls = _gate(
        tmp_path, ansible_env, loaded="580.95.05", before="580.95.05", target="580.105.08", reboot=False
    )
    assert rc != 0 and "Nothing was changed" in output and "invoke metal --stack metal --reboot" in output
    assert calls == []


def test_driver_change_under_a_loaded_module_drains_first(
    tmp_path: Path, ansible_env: dict[str, str]
) -> None:
    """With reboots allowed the node is cordoned and drained before the packages change
    (kubectl drain docs: drain cordons, then evicts; --ignore-daemonsets keeps DaemonSet pods)."""
    rc, output, calls = _gate(
        tmp_path, ansible_env, loaded="580.95.05", before="580.95.05", target="580.105.08", reboot=True
    )
    assert rc == 0, output
    assert (
        calls[0].startswith("get node ")
        and calls[1].startswith("drain ")
        and "--ignore-daemonsets" in calls[1]
    )
    assert "drained=True" in output


def test_no_driver_change_touches_no_node(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    """Same version, module loaded (the steady state): no drain, no failure."""
    rc, output, calls = _gate(
        tmp_path, ansible_env, loaded="580.95.05", before="580.95.05", target="580.95.05", reboot=False
    )
    assert rc == 0, output
    assert calls == []


def test_host_that_is_not_a_node_yet_is_not_drained(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    """Drain is on for every host `invoke metal` prepares; a host that has not joined the cluster
    (`kubectl get node` answers NotFound) has nothing to drain and must not fail."""
    rc, output, calls = _gate(
        tmp_path,
        ansible_env,
        loaded="580.95.05",
        before="580.95.05",
        target="580.105.08",
        reboot=True,
        node=False,
    )
    assert rc == 0, output
    assert [call.split()[0] for call in calls] == ["get"] and "drained=False" in output


def test_reboot_path_drains_through_the_same_tasks() -> None:
    """The reboot block drains through drain.yml when drain is on."""
    reboot = _flat(_tasks("reboot.yml"))
    drain = next(t for t in reboot if t["name"] == "Cordon and drain the Kubernetes node")
    assert drain["ansible.builtin.import_tasks"] == "drain.yml"


@pytest.mark.parametrize("name", ["install-apt.yml", "install-dnf.yml"])
def test_gate_runs_before_packages_are_unlocked(name: str) -> None:
    """The gate comes before the unlock and the install in both package paths."""
    names = [t["name"] for t in _flat(_tasks(name))]
    gate = names.index("Drain before a driver change under a loaded module, or refuse it")
    assert gate < names.index("Install the driver packages")
    assert gate < next(i for i, n in enumerate(names) if n.startswith("Unhold") or n.startswith("Unlock"))


def _boot_check(tmp_path: Path, env: dict[str, str], module: str | None) -> tuple[int, str]:
    """Run tasks/boot-kernel-check.yml with a stub boot-kernel query and a stub modinfo."""
    modinfo = tmp_path / "modinfo"
    modinfo.write_text(
        f"#!/bin/sh\necho {module}\n" if module else "#!/bin/sh\necho 'modinfo: ERROR' >&2\nexit 1\n"
    )
    modinfo.chmod(0o755)
    include = {
        "ansible.builtin.include_role": {"name": str(ROLE), "tasks_from": "boot-kernel-check.yml"},
        "vars": {
            "nvidia_driver__boot_kernel_query": ["echo", "/boot/vmlinuz-6.8.0-99-generic"],
            "nvidia_driver__modinfo": str(modinfo),
            "nvidia_driver_installed_version": "580.95.05",
        },
    }
    done = run_local_play(tmp_path / "boot.yml", {"tasks": [include]}, env)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize(("module", "ok"), [("580.95.05", True), ("580.159.03", False), (None, False)])
def test_no_reboot_into_a_kernel_without_the_drivers_module(
    tmp_path: Path, ansible_env: dict[str, str], module: str | None, ok: bool
) -> None:
    """Canonical's linux-restricted-modules ship one signed module package per kernel ABI
    (linux-modules-nvidia-<branch>-server-open-<abi>-<flavour>, pulled by the flavour metapackage) and build
    it for the archive's current driver: after a kernel update the next boot kernel may have no module, or
    one of another driver build. The reboot stops unless `modinfo -k <boot kernel> nvidia` shows the
    installed driver."""
    rc, output = _boot_check(tmp_path, ansible_env, module)
    assert (rc == 0) is ok, output
    if not ok:
        assert "6.8.0-99-generic" in output and "not rebooting" in output


def test_signed_modules_hold_the_kernel_with_the_driver() -> None:
    """With the signed path the kernel metapackages (GA and HWE) are held too, so unattended-upgrades
    cannot move the kernel away from the held driver's signed module; the boot check runs before the drain
    and the reboot."""
    ubuntu = yaml.safe_load((ROLE / "vars/Ubuntu.yml").read_text())
    assert {
        "linux-image-{{ nvidia_driver__kernel_flavour }}",
        "linux-image-{{ nvidia_driver__kernel_flavour }}-hwe-*",
    } <= set(ubuntu["nvidia_driver__kernel_meta_packages"])
    hold = next(
        t for t in _flat(_tasks("install-apt.yml")) if t["name"] == "Hold the kernel with the signed modules"
    )
    assert hold["ansible.builtin.command"]["argv"].startswith("{{ ['apt-mark', 'hold']")
    names = [t["name"] for t in _flat(_tasks("reboot.yml"))]
    assert (
        names.index("Check that the next boot kernel has the driver's module")
        < names.index("Cordon and drain the Kubernetes node")
        < names.index("Reboot to load the new driver")
    )


def test_imex_on_apt_takes_nvidia_modprobe_from_nvidia_at_the_drivers_version(
    tmp_path: Path, ansible_env: dict[str, str]
) -> None:
    """NVIDIA's Ubuntu IMEX install adds nvidia-modprobe=${DRIVER_VERSION}* from the CUDA repository
    (gpu-driver-container ubuntu24.04/install.sh, imex_install); the driver's origin pin sets NVIDIA's
    nvidia-* to -1, so Fabric Manager's exact set (pinned at 1001, first pin file) carries it."""
    fm = ANSIBLE_DIR / "roles/nvidia_fabricmanager/vars"
    tasks = [
        {"ansible.builtin.include_vars": str(fm / "main.yml")},
        {"ansible.builtin.include_vars": str(fm / "Debian.yml")},
        {"ansible.builtin.debug": {"msg": "exact={{ nvidia_fabricmanager__exact_packages | join(',') }}"}},
    ]
    play = {
        "tasks": tasks,
        "vars": {
            "nvidia_fabricmanager_driver_branch": "580",
            "nvidia_fabricmanager_package": "",
            "nvidia_fabricmanager_nvlink5": False,
            "nvidia_fabricmanager_imex": True,
        },
    }
    done = run_local_play(tmp_path / "fm.yml", play, ansible_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exact=nvidia-fabricmanager,libnvidia-nscq,nvidia-imex,nvidia-modprobe" in done.stdout


def test_rhel_fabricmanager_is_unlocked_only_when_its_version_differs(
    tmp_path: Path, ansible_env: dict[str, str]
) -> None:
    """`dnf versionlock delete` then `add` on every run never reaches changed=0 and unlocks Fabric
    Manager for a moment (community.general.dnf_versionlock reports both as changes): the unlock's
    condition counts the exact packages already at the driver's version."""
    tasks = yaml.safe_load((ANSIBLE_DIR / "roles/nvidia_fabricmanager/tasks/install-dnf.yml").read_text())
    unlock = next(t for t in tasks if t["name"] == "Unlock Fabric Manager for an upgrade")
    expression = unlock["vars"]["nvidia_fabricmanager__at_version"]
    play = {
        "tasks": [
            {
                "ansible.builtin.debug": {"msg": "at={{ nvidia_fabricmanager__at_version }}"},
                "vars": {"nvidia_fabricmanager__at_version": expression},
            }
        ],
        "vars": {
            "nvidia_fabricmanager__version": "580.95.05",
            "nvidia_fabricmanager__installed": {
                "stdout_lines": ["nvidia-fabricmanager 580.95.05", "libnvidia-nscq 580.95.05"]
            },
        },
    }
    done = run_local_play(tmp_path / "a8.yml", play, ansible_env)
    assert "at=2" in done.stdout, done.stdout + done.stderr
    play["vars"]["nvidia_fabricmanager__installed"]["stdout_lines"][0] = "nvidia-fabricmanager 580.82.07"
    done = run_local_play(tmp_path / "a8.yml", play, ansible_env)
    assert "at=1" in done.stdout, done.stdout + done.stderr
    assert (
        "nvidia_fabricmanager__at_version | int != nvidia_fabricmanager__exact_packages | length"
        in unlock["when"]
    )


@pytest.mark.parametrize(
    ("installed", "headers"),
    [
        (["linux-image-generic-hwe-24.04 ii "], "linux-headers-generic-hwe-24.04"),
        (["linux-image-generic ii ", "linux-image-generic-hwe-24.04 un "], "linux-headers-generic"),
        ([], "linux-headers-generic"),
    ],
)
def test_ubuntu_hwe_host_gets_the_hwe_headers_metapackage(
    tmp_path: Path, ansible_env: dict[str, str], installed: list[str], headers: str
) -> None:
    """Ubuntu's HWE kernels follow linux-image-generic-hwe-<release>, whose headers metapackage is
    linux-headers-generic-hwe-<release> (Ubuntu kernel lifecycle, linux-meta-hwe packaging); the GA
    linux-headers-generic would bring headers of the GA series, so DKMS misses the kernel the host boots."""
    tasks = [
        {"ansible.builtin.include_vars": str(ROLE / "vars/Ubuntu.yml")},
        {
            "ansible.builtin.set_fact": {
                "nvidia_driver__kernel_flavour": "generic",
                "nvidia_driver__image_meta": {"stdout_lines": installed},
            }
        },
        {"ansible.builtin.debug": {"msg": "headers={{ nvidia_driver__boot_header_packages | join(',') }}"}},
    ]
    done = run_local_play(
        tmp_path / "hwe.yml", {"tasks": tasks, "vars": {"nvidia_driver_branch": "580"}}, ansible_env
    )
    assert f"headers={headers}\n" in done.stdout, done.stdout + done.stderr
    names = [t["name"] for t in _flat(_tasks("install-apt.yml"))]
    assert names.index("Find the kernel metapackage the host follows") < names.index(
        "Install headers for the default boot kernel"
    )


def _evaluate(tmp_path: Path, env: dict[str, str], expression: str, facts: dict) -> str:
    play = {
        "tasks": [
            {"ansible.builtin.debug": {"msg": "value={{ probe | join(';') }}"}, "vars": {"probe": expression}}
        ],
        "vars": facts,
    }
    done = run_local_play(tmp_path / "probe.yml", play, env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split("value=", 1)[1].split("\n", 1)[0]


def test_installed_package_lists_read_dpkg_status(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    """dpkg-query's ${db:Status-Abbrev} is three characters ("ii " installed, "hi " held,
    "un " known but not installed; dpkg-query(1)); only installed packages count."""
    lines = [
        "nvidia-utils-580 580.95.05-1 ii ",
        "nvidia-driver-580-open 580.95.05-1 hi ",
        "cuda-drivers 580.95.05-1 un ",
    ]
    found = _tasks("archive-version.yml")[1]["vars"]["nvidia_driver__found"]
    value = _evaluate(tmp_path, ansible_env, found, {"nvidia_driver__other_flavour": {"stdout_lines": lines}})
    assert value == "nvidia-utils-580 580.95.05-1;nvidia-driver-580-open 580.95.05-1"
    hold = next(
        t for t in _flat(_tasks("install-apt.yml")) if t["name"] == "Hold the kernel with the signed modules"
    )
    kernel = ["linux-generic ii ", "linux-image-generic hi ", "linux-generic-hwe-24.04 un "]
    value = _evaluate(
        tmp_path,
        ansible_env,
        hold["vars"]["nvidia_driver__kernel_found"],
        {"nvidia_driver__kernel_meta": {"stdout_lines": kernel}},
    )
    assert value == "linux-generic;linux-image-generic"


def test_rhel_headers_follow_the_boot_kernel_and_keys_are_imported_by_fingerprint() -> None:
    """dnf `state: present` is satisfied by any installed kernel-devel (ansible.builtin.dnf docs:
    present = installed, not upgraded), so the boot kernel's kernel-devel is asked for by version from
    `grubby --default-kernel` (/boot/vmlinuz-<version>). Repository keys go through ansible.builtin.rpm_key
    before the repository is configured; the toolkit's RPM repository is signed with the key the apt path
    checks (NVIDIA's nvidia-container-toolkit.repo: gpgkey=https://nvidia.github.io/libnvidia-container/gpgkey)."""
    tasks = _flat(_tasks("install-dnf.yml"))
    names = [t["name"] for t in tasks]
    boot = next(t for t in tasks if t["name"] == "Install headers for the default boot kernel")
    assert "nvidia_driver__boot_kernel_path.stdout" in boot["ansible.builtin.dnf"]["name"]
    assert "vmlinuz-" in boot["ansible.builtin.dnf"]["name"]
    query = next(t for t in tasks if t["name"] == "Find the default boot kernel")
    assert query["ansible.builtin.command"]["argv"] == "{{ nvidia_driver__boot_kernel_query }}"
    assert names.index("Find the default boot kernel") < names.index(
        "Install headers for the default boot kernel"
    )
    key = next(t for t in tasks if "ansible.builtin.rpm_key" in t)
    assert "nvidia_driver_rpm_key_fingerprint" in key["ansible.builtin.rpm_key"]["fingerprint"]
    assert names.index(key["name"]) < names.index("Configure NVIDIA's CUDA repository")
    toolkit = yaml.safe_load(
        (ANSIBLE_DIR / "roles/nvidia_container_toolkit/tasks/install-dnf.yml").read_text()
    )
    toolkit_tasks = _flat(toolkit)
    toolkit_key = next(t for t in toolkit_tasks if "ansible.builtin.rpm_key" in t)
    assert (
        toolkit_key["ansible.builtin.rpm_key"]["fingerprint"]
        == "{{ nvidia_container_toolkit_repo_key_fingerprint }}"
    )
    assert [t["name"] for t in toolkit_tasks].index(toolkit_key["name"]) < [
        t["name"] for t in toolkit_tasks
    ].index("Configure the toolkit repository")


def test_module_options_render_as_modprobe_options_and_unknown_keys_are_refused(
    tmp_path: Path, ansible_env: dict[str, str]
) -> None:
    """modprobe.d(5): `options <module> <param>=<value>...`; the nvidia module's parameters are NVreg_*
    (`modinfo -p nvidia`). A change under a loaded module needs the reboot (parameters are read at load)."""
    main = _tasks("main.yml")
    write = next(t for t in main if t["name"] == "Set the nvidia module options")
    play = {
        "tasks": [
            {
                "ansible.builtin.copy": {
                    **write["ansible.builtin.copy"],
                    "dest": str(tmp_path / "nvidia.conf"),
                },
            }
        ],
        "vars": {
            "nvidia_driver_module_options": {"NVreg_EnableStreamMemOPs": True, "NVreg_RegistryDwords": "A=1"}
        },
    }
    done = run_local_play(tmp_path / "options.yml", play, ansible_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "nvidia.conf").read_text().splitlines()[1] == (
        "options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=A=1"
    )
    assert "Rebuild the initramfs" in write["notify"]
    check = next(t for t in main if t["name"] == "Check the nvidia module options are NVreg_ parameters")
    bad = run_local_play(
        tmp_path / "bad.yml",
        {
            "tasks": [{"ansible.builtin.assert": check["ansible.builtin.assert"]}],
            "vars": {"nvidia_driver_module_options": {"modeset": 1}},
        },
        ansible_env,
    )
    assert bad.returncode != 0 and "NVreg_" in bad.stdout
    decide = next(
        t for t in _tasks("reboot.yml") if t["name"] == "Decide whether the new driver needs a reboot"
    )
    assert (
        "nvidia_driver__module_options is changed"
        in decide["ansible.builtin.set_fact"]["nvidia_driver_reboot_required"]
    )
