"""Fixtures for the Ansible tests: community.general from PyPI and an environment that finds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ansible.community_general import extract_community_general
from tests.ansible.support import ansible_environment


@pytest.fixture(scope="session")
def collections_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_community_general(tmp_path_factory.mktemp("collections"))


@pytest.fixture(scope="session")
def ansible_env(collections_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return ansible_environment(collections_path, tmp_path_factory.mktemp("ansible-home"))
