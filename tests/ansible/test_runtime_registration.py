"""nvidia_container_toolkit registers the nvidia runtime only when the runtime config lacks it, for
containerd, docker and cri-o: its runtime tasks run on this machine over a local connection against config
files in a temporary folder, with the stub nvidia-ctk (which records its calls) first on PATH."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.ansible.stubrepo import NVIDIA_CTK
from tests.ansible.support import ANSIBLE_DIR, run_local_play


def _register(tmp_path: Path, env: dict[str, str], runtime: str, config: Path) -> list[str]:
    """Run the role's runtime tasks twice; return the nvidia-ctk calls."""
    bin_dir, log = tmp_path / "bin", tmp_path / "nvidia-ctk.calls"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-ctk").write_text(NVIDIA_CTK)
    (bin_dir / "nvidia-ctk").chmod(0o755)
    play = {
        "vars": {
            "nvidia_container_toolkit_runtime": runtime,
            "nvidia_container_toolkit_runtime_config": str(config),
            "nvidia_container_toolkit_restart_runtime": False,
        },
        "tasks": [
            {
                "ansible.builtin.include_role": {
                    "name": str(ANSIBLE_DIR / "roles/nvidia_container_toolkit"),
                    "tasks_from": "runtime.yml",
                }
            }
        ],
    }
    run_env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "NVIDIA_CTK_LOG": str(log)}
    for _ in range(2):
        done = run_local_play(tmp_path / "runtime.yml", play, run_env)
        assert done.returncode == 0, done.stdout + done.stderr
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("runtime", ["containerd", "crio"])
def test_toml_runtime_is_configured_once(tmp_path: Path, ansible_env: dict[str, str], runtime: str) -> None:
    config = tmp_path / "etc" / f"{runtime}.toml"
    calls = _register(tmp_path, ansible_env, runtime, config)
    assert calls == [f"runtime configure --runtime={runtime} --config={config}"]
    assert config.read_text().count("runtimes.nvidia]") == 1


def test_docker_daemon_json_keeps_its_settings(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    config = tmp_path / "daemon.json"
    config.write_text(json.dumps({"log-driver": "json-file", "runtimes": {"runc": {"path": "runc"}}}))
    calls = _register(tmp_path, ansible_env, "docker", config)
    assert calls == [f"runtime configure --runtime=docker --config={config}"]
    daemon = json.loads(config.read_text())
    assert daemon["log-driver"] == "json-file"
    assert sorted(daemon["runtimes"]) == ["nvidia", "runc"]


def test_already_registered_runtime_is_left_alone(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    config = tmp_path / "daemon.json"
    before = json.dumps({"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}})
    config.write_text(before)
    assert _register(tmp_path, ansible_env, "docker", config) == []
    assert config.read_text() == before
