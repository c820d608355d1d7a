"""infra.metal.inventory: the inventory `invoke metal` renders, checked by Ansible itself."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.errors import ConfigError
from infra.metal.inventory import (
    PLAYBOOK,
    MetalInventoryError,
    group_limits,
    playbook_command,
    render_inventory,
)
from infra.versions import Versions
from tests.ansible.support import venv_tool

pytestmark = pytest.mark.xdist_group("build-metal")

GROUPS = [
    {"name": "gpu-h100", "hosts": ["h100-01", "h100-02"], "gpuModel": "h100-80gb", "gpusPerNode": 8},
    {"name": "gpu_l40s", "hosts": ["l40s-01"], "gpuModel": "l40s", "gpusPerNode": 4},
]


def test_one_group_per_host_group_under_gpu_hosts() -> None:
    inventory = render_inventory(GROUPS, driver_branch="580", toolkit_version="1.18.0", fabricmanager=None)
    children = inventory["gpu_hosts"]["children"]
    assert list(children) == ["gpu_h100", "gpu_l40s"]
    assert children["gpu_h100"] == {
        "hosts": {"h100-01": None, "h100-02": None},
        "vars": {"gpu_node_verify_expected_count": 8, "gpu_node_verify_expected_model": "H100"},
    }
    assert inventory["gpu_hosts"]["vars"] == {
        "nvidia_driver_branch": "580",
        "nvidia_driver_version": "",
        "nvidia_fabricmanager_driver_branch": "580",
        "nvidia_fabricmanager_enabled": None,
        "nvidia_container_toolkit_version": "1.18.0",
        "gpu_node_verify_expected_driver_branch": "580",
        "nvidia_driver_drain_enabled": True,
        "nvidia_driver_drain_kubeconfig": "",
        "nvidia_container_toolkit_cdi_enabled": False,
    }


def test_ansible_inventory_reads_the_rendered_inventory(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(render_inventory(GROUPS, "580", "1.18.0", True)))
    done = subprocess.run(
        [venv_tool("ansible-inventory"), "-i", str(path), "--list"],
        env=ansible_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listed = json.loads(done.stdout)
    assert sorted(listed["gpu_hosts"]["children"]) == ["gpu_h100", "gpu_l40s"]
    assert listed["gpu_h100"]["hosts"] == ["h100-01", "h100-02"]
    host = listed["_meta"]["hostvars"]["l40s-01"]
    assert host["gpu_node_verify_expected_count"] == 4
    assert host["gpu_node_verify_expected_model"] == "L40S"
    assert host["nvidia_driver_branch"] == "580"
    assert host["nvidia_fabricmanager_enabled"] is True


def test_rendered_inventory_and_command_select_hosts(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(render_inventory(GROUPS, "580", "1.18.0", None)))
    argv = playbook_command(path, check=True, limit="gpu_h100")
    argv[0] = venv_tool(argv[0])
    done = subprocess.run(
        [*argv, "--list-hosts"], env=ansible_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = done.stdout.split("play #2")[1]
    assert "h100-01" in listed and "h100-02" in listed and "l40s-01" not in listed


def test_playbook_command_is_an_argv_list() -> None:
    assert playbook_command("inv.yml", check=False, limit=None) == [
        "ansible-playbook",
        "-i",
        "inv.yml",
        str(PLAYBOOK),
    ]
    assert playbook_command(Path("inv.yml"), check=True, limit="h100-01,h100-02")[4:] == [
        "--check",
        "--diff",
        "--limit",
        "h100-01,h100-02",
    ]
    assert PLAYBOOK.is_file()


@pytest.mark.parametrize(
    ("groups", "branch", "message"),
    [
        ([{"name": "a", "hosts": ["h"], "gpuModel": "l40s"}], "580", "host_groups[0] has no 'gpusPerNode'"),
        ([{"name": "a", "hosts": [], "gpuModel": "l40s", "gpusPerNode": 1}], "580", "host_groups[0].hosts"),
        (
            [{"name": "a", "hosts": ["h"], "gpuModel": "l40s", "gpusPerNode": 0}],
            "580",
            "host_groups[0].gpusPerNode",
        ),
        ([{"name": "a", "hosts": ["h"], "gpuModel": "l40s", "gpusPerNode": True}], "580", "gpusPerNode"),
        (
            [{"name": "9x", "hosts": ["h"], "gpuModel": "l40s", "gpusPerNode": 1}],
            "580",
            "host group name '9x'",
        ),
        ([GROUPS[1], {**GROUPS[1], "hosts": ["other"]}], "580", "host_groups[1].name 'gpu_l40s' repeats"),
        ([GROUPS[1], {**GROUPS[0], "hosts": ["l40s-01"]}], "580", "host 'l40s-01' is in both"),
        (GROUPS, "580.95", "driver_branch must be a driver major version"),
        ([], "580", "host_groups is empty"),
    ],
)
def test_bad_host_groups_name_the_key(groups: list, branch: str, message: str) -> None:
    with pytest.raises(MetalInventoryError, match=re.escape(message)) as raised:
        render_inventory(groups, branch, "1.18.0", None)
    assert isinstance(raised.value, ConfigError) and raised.value.exit_code == 2


def test_versions_recipe_pins_an_exact_driver_of_its_branch() -> None:
    """Every host of a fleet runs the same driver: the recipe names an exact version, and it must be one of
    the pinned branch (the Ansible role refuses a version outside nvidia_driver_branch as well)."""
    versions = Versions()
    inventory = render_inventory(
        GROUPS, versions.nvidia_driver_branch, "1.20.0", None, driver_version=versions.nvidia_driver_version
    )
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", inventory["gpu_hosts"]["vars"]["nvidia_driver_version"])
    for bad in ("575.57.08", "580", "latest"):
        with pytest.raises(MetalInventoryError, match=r"versions\.nvidiaDriverVersion"):
            render_inventory(GROUPS, "580", "1.20.0", None, driver_version=bad)


def test_each_host_group_is_its_own_rollout(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    """The play's `serial` batches are shares of the play's hosts (Ansible docs, "Setting the batch size
    with serial"); one run per group keeps a batch inside one group, and a user limit narrows each run."""
    inventory = render_inventory(GROUPS, "580", "1.20.0", None)
    assert group_limits(inventory, None) == ["gpu_h100", "gpu_l40s"]
    assert group_limits(inventory, "h100-01") == ["gpu_h100:&h100-01"]
    assert group_limits(inventory, "h100-01,gpu_l40s") == [
        "gpu_h100:&h100-01,gpu_l40s",
        "gpu_l40s:&h100-01,gpu_l40s",
    ]
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    argv = playbook_command(path, check=True, limit="gpu_h100:&h100-01", reboot=True, continue_command="x")
    assert json.loads(argv[-1]) == {
        "nvidia_driver_reboot_allowed": True,
        "nvidia_driver_continue_command": "x",
    }
    argv[0] = venv_tool(argv[0])
    done = subprocess.run(
        [*argv, "--list-hosts"], env=ansible_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = done.stdout.split("play #2")[1]
    assert "h100-01" in listed and "h100-02" not in listed and "l40s-01" not in listed


def test_hosts_are_drained_with_the_stacks_kubeconfig(tmp_path: Path) -> None:
    """`invoke metal --reboot` reboots Kubernetes nodes: the rendered inventory turns the drain on
    (kubectl drain docs: cordon, then evict honouring PodDisruptionBudgets) with cluster.kubeconfig."""
    inventory = render_inventory(GROUPS, "580", "1.20.0", None, kubeconfig=str(tmp_path / "kubeconfig"))
    rendered = inventory["gpu_hosts"]["vars"]
    assert rendered["nvidia_driver_drain_enabled"] is True
    assert rendered["nvidia_driver_drain_kubeconfig"] == str(tmp_path / "kubeconfig")


def test_invoke_metal_passes_the_stack_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    """The metal stack's cluster.kubeconfig reaches the drain (expanded on the control node)."""
    import tasks
    from tests.tasks.test_render_and_metal import _ctx

    monkeypatch.setattr("infra.metal.run.run_playbook", lambda argv, env: 0)
    tasks.metal(_ctx(), stack="metal", reboot=True)
    rendered = yaml.safe_load((Path(tasks.ROOT) / "build/metal/inventory.yml").read_text())["gpu_hosts"][
        "vars"
    ]
    assert rendered["nvidia_driver_drain_enabled"] is True
    assert rendered["nvidia_driver_drain_kubeconfig"] == str(Path("~/.kube/gpufleet-metal.yaml").expanduser())


def test_host_toolkit_cdi_agrees_with_the_gpu_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """With `cdi.enabled` the operator's device plugin uses the standard cdi.k8s.io/ annotations
    that containerd/CRI-O must inject (NVIDIA/gpu-operator PR #1285; GPU operator CDI docs); containerd 1.7
    has CDI off, so host-managed drivers need the toolkit's --enable-cdi."""
    import tasks
    from infra.gpu_stack.gpu_operator import gpu_operator_values
    from tests.tasks.test_render_and_metal import _ctx

    spec = tasks.load("metal")
    assert spec.cluster.driver_managed_by == "host"
    monkeypatch.setattr("infra.metal.run.run_playbook", lambda argv, env: 0)
    tasks.metal(_ctx(), stack="metal")
    rendered = yaml.safe_load((Path(tasks.ROOT) / "build/metal/inventory.yml").read_text())["gpu_hosts"][
        "vars"
    ]
    assert rendered["nvidia_container_toolkit_cdi_enabled"] is gpu_operator_values(spec)["cdi"]["enabled"]
    assert rendered["nvidia_container_toolkit_cdi_enabled"] is True


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"kubeconfig": ""}, "cluster.kubeconfig"), ({"cdi_enabled": "yes"}, "cdi.enabled")],
)
def test_bad_input_names_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(MetalInventoryError, match=key) as info:
        render_inventory(GROUPS, "580", "1.20.0", None, **kwargs)
    assert isinstance(info.value, ConfigError)
