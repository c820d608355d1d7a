"""Paths and small functions shared by the Ansible tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
