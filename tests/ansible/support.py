"""Paths and small functions shared by the Ansible tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
ROLES = sorted(path for path in (ANSIBLE_DIR / "roles").iterdir() if path.is_dir())
PLAYBOOKS = sorted((ANSIBLE_DIR / "playbooks").glob("*.yml"))


def venv_tool(name: str) -> str:
    """An Ansible command from the interpreter's own environment (the venv running the tests)."""
    return str(Path(sys.executable).parent / name)


def ansible_environment(collections: Path, home: Path) -> dict[str, str]:
    """Environment for ansible-* commands: the repo's ansible.cfg, the extracted collection, no colour."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
    }


def run_local_play(
    path: Path, play: dict[str, Any], env: dict[str, str], extra_vars: dict[str, object] | None = None
) -> subprocess.CompletedProcess[str]:
    """Write one play against this machine (local connection, this Python) to `path` and run it."""
    play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        **play,
        "vars": {"ansible_python_interpreter": sys.executable, **play.get("vars", {})},
    }
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    extra = [arg for key, value in (extra_vars or {}).items() for arg in ("-e", f"{key}={value}")]
    return subprocess.run(
        [venv_tool("ansible-playbook"), "-i", "localhost,", str(path), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
