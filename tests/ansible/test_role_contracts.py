"""Role contracts: defaults and argument specs agree, variables are documented, bad input stops the play."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.ansible.support import ANSIBLE_DIR, PLAYBOOKS, REPO, ROLES, venv_tool

EXPECTED_ROLES = [
    "gpu_node_verify",
    "nvidia_container_toolkit",
    "nvidia_driver",
    "nvidia_fabricmanager",
    "slurm_common",
    "slurm_controller",
    "slurm_node",
]


def _defaults(role: Path) -> dict:
    return yaml.safe_load((role / "defaults/main.yml").read_text()) or {}


def _options(role: Path) -> dict:
    return yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def test_the_roles_exist_with_galaxy_layout() -> None:
    assert [role.name for role in ROLES] == EXPECTED_ROLES
    for role in ROLES:
        for part in (
            "defaults/main.yml",
            "meta/main.yml",
            "meta/argument_specs.yml",
            "tasks/main.yml",
            "vars/main.yml",
            "README.md",
        ):
            assert (role / part).is_file(), f"{role.name} lacks {part}"


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_defaults_and_argument_spec_name_the_same_variables(role: Path) -> None:
    assert sorted(_defaults(role)) == sorted(_options(role))


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_argument_spec_defaults_equal_role_defaults(role: Path) -> None:
    defaults, options = _defaults(role), _options(role)
    for name, option in options.items():
        assert option.get("description"), f"{role.name}: {name} has no description"
        assert "type" in option, f"{role.name}: {name} has no type"
        assert option.get("default") == defaults[name], f"{role.name}: {name} default differs"


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_variables_are_prefixed_and_documented(role: Path) -> None:
    """Every variable carries the role's prefix and sits in a block that opens with a comment."""
    blocks = (role / "defaults/main.yml").read_text().removeprefix("---\n").split("\n\n")
    for block in blocks:
        lines = [line for line in block.strip().splitlines() if not line.startswith("# ----")]
        variables = [line.split(":")[0] for line in lines if line and not line.startswith(("#", " "))]
        if variables:
            assert lines[0].startswith("#"), f"{role.name}: {variables} have no comment above them"
        for variable in variables:
            assert variable.startswith(role.name + "_"), f"{variable} lacks the {role.name}_ prefix"


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_readme_mentions_every_variable(role: Path) -> None:
    readme = (role / "README.md").read_text()
    missing = [name for name in _defaults(role) if name not in readme]
    assert not missing, f"{role.name}/README.md does not mention {missing}"


def _tagged(tags: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [
            venv_tool("ansible-playbook"),
            "--list-tasks",
            "--tags",
            tags,
            "-i",
            "ansible/inventory/example.yml",
            str(PLAYBOOKS[0]),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_kernel_and_systemd_tags_cover_the_tasks_a_chroot_cannot_run(ansible_env: dict[str, str]) -> None:
    kernel, systemd = _tagged("needs_kernel", ansible_env), _tagged("needs_systemd", ansible_env)
    for task in (
        "Read the Secure Boot state",
        "Reboot to load the new driver",
        "Load the nvidia module",
        "Install headers for the running kernel",
        "Generate the CDI specification",
        "Query the GPUs",
        "Fail when the host differs from its group",
    ):
        assert task in kernel
    for task in ("Enable nvidia-persistenced", "Enable and start Fabric Manager"):
        assert task in systemd
    assert "Install the driver packages" not in kernel + systemd


def _run_with(tmp_path: Path, env: dict[str, str], extra: str) -> subprocess.CompletedProcess:
    """Run gpu-hosts.yml against this machine over a local connection with one bad extra variable."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "gpu_hosts": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_become": False,
                            "ansible_python_interpreter": sys.executable,
                        }
                    }
                }
            }
        )
    )
    return subprocess.run(
        [
            venv_tool("ansible-playbook"),
            "-i",
            str(inventory),
            str(ANSIBLE_DIR / "playbooks/gpu-hosts.yml"),
            "-e",
            extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('{"nvidia_driver_branch": ["580"]}', 'nvidia_driver_branch=["580"]'),
        ('{"nvidia_driver_branch": 580}', "nvidia_driver_branch=580"),
        ('{"nvidia_container_toolkit_runtime": "podman"}', "nvidia_container_toolkit_runtime must be one of"),
        ('{"gpu_node_verify_expected_count": "eight"}', "gpu_node_verify_expected_count"),
        ('{"nvidia_driver_module_flavor": "closed"}', "nvidia_driver_module_flavor must be one of"),
    ],
)
def test_bad_variable_stops_the_play_before_anything_runs(
    tmp_path: Path, ansible_env: dict[str, str], extra: str, message: str
) -> None:
    done = _run_with(tmp_path, ansible_env, extra)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert message in output
    assert "PLAY [Prepare NVIDIA GPU hosts]" not in output  # the play that changes hosts never started
