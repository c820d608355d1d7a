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

# The role refuses to configure a runtime that is not installed, and reads containerd's version (CDI needs
# 1.7+): stand-ins for the runtimes' binaries, printing what `containerd --version` prints for v1.7
# (containerd cmd/containerd/command/main.go: "<name> <package> <version> <revision>").
RUNTIME_BINARIES = {
    "containerd": "#!/bin/sh\necho 'containerd github.com/containerd/containerd v1.7.24 88bf19b2105c'\n",
    "crio": "#!/bin/sh\necho 'crio version 1.30.0'\n",
    "dockerd": "#!/bin/sh\necho 'Docker version 27.3.1, build 41ca978'\n",
}


def _register(
    tmp_path: Path, env: dict[str, str], runtime: str, config: Path, dropin: Path | None = None
) -> list[str]:
    """Run the role's runtime tasks twice; return the nvidia-ctk calls."""
    bin_dir, log = tmp_path / "bin", tmp_path / "nvidia-ctk.calls"
    bin_dir.mkdir(exist_ok=True)
    for name, script in {"nvidia-ctk": NVIDIA_CTK, **RUNTIME_BINARIES}.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    play = {
        "vars": {
            "nvidia_container_toolkit_runtime": runtime,
            "nvidia_container_toolkit_runtime_config": str(config),
            "nvidia_container_toolkit_runtime_dropin": str(dropin or ""),
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
    """Toolkit 1.18+ writes the nvidia runtime into a drop-in, not the main file
    (nvidia-container-toolkit v1.20.0 cmd/nvidia-ctk/runtime/configure/configure.go, `--drop-in-config`): the
    second run finds it there and calls nothing."""
    config = tmp_path / "etc" / f"{runtime}.toml"
    dropin = tmp_path / "etc" / f"{runtime}.conf.d" / "99-nvidia.toml"
    calls = _register(tmp_path, ansible_env, runtime, config, dropin)
    assert len(calls) == 1 and calls[0].startswith(f"runtime configure --runtime={runtime} --config={config}")
    assert "--nvidia-runtime-name=nvidia" in calls[0] and f"--drop-in-config={dropin}" in calls[0]
    assert dropin.read_text().count("runtimes.nvidia]") == 1


def test_docker_daemon_json_keeps_its_settings(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    config = tmp_path / "daemon.json"
    config.write_text(json.dumps({"log-driver": "json-file", "runtimes": {"runc": {"path": "runc"}}}))
    calls = _register(tmp_path, ansible_env, "docker", config)
    assert calls == [f"runtime configure --runtime=docker --config={config} --nvidia-runtime-name=nvidia"]
    daemon = json.loads(config.read_text())
    assert daemon["log-driver"] == "json-file"
    assert sorted(daemon["runtimes"]) == ["nvidia", "runc"]


def test_already_registered_runtime_is_left_alone(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    config = tmp_path / "daemon.json"
    before = json.dumps({"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}})
    config.write_text(before)
    assert _register(tmp_path, ansible_env, "docker", config) == []
    assert config.read_text() == before
