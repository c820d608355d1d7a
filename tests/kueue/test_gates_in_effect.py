"""The real Kueue v0.19.2, started the way the twin starts it (`local_argv` over the rendered Deployment's
arguments, `local_configuration` over the chart's configuration), runs with the gates the stack's Deployment
sets: Kueue's own report of the gates it loaded says so (it logs them at V(2), which the Deployment's
`--zap-log-level=2` shows), and a gate set both in the arguments and in the configuration is refused by Kueue
itself, as on the cluster (kueue@v0.19.2 pkg/config/validation.go, `LoadAndValidateFeatureGates`). No API
server is needed for either: Kueue loads its gates before it connects (cmd/kueue/main.go:161), and its
kubeconfig names a closed loopback port."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kueue.conftest import Render
from tests.support import eventually
from twin.kueue import deployment_args, local_argv, local_configuration, manager_configuration, new_ports
from twin.toolchain.build import Toolchain

CLOSED = "https://127.0.0.1:1"  # nothing listens: Kueue gets as far as its first API call


def kubeconfig(folder: Path) -> Path:
    path = folder / "kueue.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": CLOSED}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    return path


@pytest.fixture
def start(tools: Toolchain, tmp_path: Path) -> Iterator[Any]:
    """`start(objects)`: Kueue with the rendered objects' arguments and configuration; its log's path."""
    procs: list[subprocess.Popen[bytes]] = []

    def started(objects: list[dict[str, Any]]) -> Path:
        config = local_configuration(manager_configuration(objects), new_ports(), tmp_path / "certs")
        path = tmp_path / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(config))
        log = tmp_path / "kueue.log"
        argv = local_argv(tools["kueue"], deployment_args(objects), path, kubeconfig(tmp_path))
        with log.open("wb") as out:
            procs.append(
                subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            )
        return log

    yield started
    for proc in procs:
        proc.kill()
        proc.wait(10)


def loaded_gates(log: Path) -> dict[str, bool] | None:
    for line in log.read_text(errors="replace").splitlines():
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("msg") == "Loaded feature gates":
            return dict(entry["featureGates"])
    return None


def test_kueue_runs_with_the_gates_of_the_stacks_deployment(render: Render, start: Any) -> None:
    gates = [{"name": "VisibilityOnDemand", "enabled": False}, {"name": "PartialAdmission", "enabled": False}]
    log = start(render("metal", featureGates=gates))
    loaded = eventually(lambda: loaded_gates(log), "Kueue's report of its feature gates", 30)
    assert (
        loaded["VisibilityOnDemand"] is False and loaded["PartialAdmission"] is False
    )  # both beta, on by default
    assert loaded["TopologyAwareScheduling"] is True  # a gate the Deployment leaves at Kueue's default


def test_without_gates_in_the_deployment_kueue_keeps_its_defaults(render: Render, start: Any) -> None:
    log = start(render("metal"))
    loaded = eventually(lambda: loaded_gates(log), "Kueue's report of its feature gates", 30)
    assert loaded["VisibilityOnDemand"] is True  # nothing on the twin turns the visibility API off


def test_a_gate_in_both_the_deployment_and_the_configuration_is_refused_by_kueue(
    render: Render, start: Any
) -> None:
    gates = [{"name": "PartialAdmission", "enabled": False}]
    log = start(render("metal", config_gates={"PartialAdmission": False}, featureGates=gates))
    said = eventually(lambda: "conflicting feature gates detected" in log.read_text(errors="replace"),
                      "Kueue's refusal", 30)  # fmt: skip
    assert said and loaded_gates(log) is None
