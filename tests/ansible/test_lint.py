"""ansible-lint (production profile, offline) over ansible/, and --syntax-check on every playbook."""

from __future__ import annotations

import subprocess

import pytest

from tests.ansible.support import PLAYBOOKS, REPO, venv_tool


def test_ansible_lint_production_profile_passes(ansible_env: dict[str, str]) -> None:
    done = subprocess.run(
        [venv_tool("ansible-lint"), "--offline", "--profile", "production", "--nocolor", "ansible/"],
        cwd=REPO,
        env=ansible_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Profile 'production' was required, and it passed" in done.stdout + done.stderr


def test_there_are_playbooks() -> None:
    assert [path.name for path in PLAYBOOKS] == ["gpu-hosts.yml", "slurm-cluster.yml"]


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda path: path.name)
def test_playbook_syntax(playbook, ansible_env: dict[str, str]) -> None:
    done = subprocess.run(
        [
            venv_tool("ansible-playbook"),
            "--syntax-check",
            "-i",
            "ansible/inventory/example.yml",
            str(playbook),
        ],
        cwd=REPO,
        env=ansible_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
