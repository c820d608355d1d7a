"""Kueue on the twin runs with the arguments of the chart's controller-manager Deployment as the stack renders
it: only `--config` and `--kubeconfig` change, and feature gates stay where the stack put them (Kueue refuses a
gate set both as `--feature-gates` and in its configuration: kueue@v0.19.2 pkg/config/validation.go)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kueue.conftest import Render
from twin.kueue import deployment_args, local_argv, manager_configuration

BINARY, CONFIG, KUBECONFIG = (
    Path("/opt/kueue"),
    Path("/twin/kueue-config.yaml"),
    Path("/twin/kueue.kubeconfig"),
)


def test_the_twin_runs_the_deployments_flags_with_a_local_config_and_kubeconfig(render: Render) -> None:
    args = deployment_args(render("metal"))
    argv = local_argv(BINARY, args, CONFIG, KUBECONFIG)
    assert argv[:3] == [str(BINARY), f"--config={CONFIG}", f"--kubeconfig={KUBECONFIG}"]
    kept = [a for a in args if not a.startswith("--config=")]
    assert argv[3:] == kept
    assert "--zap-log-level=2" in kept  # the chart's controllerManager.manager.logLevel
    assert not any(a.startswith("--config=") and a != f"--config={CONFIG}" for a in argv)


def test_gates_in_the_chart_values_reach_kueues_command_line_once(render: Render) -> None:
    gates = [
        {"name": "TopologyAwareScheduling", "enabled": False},
        {"name": "PartialAdmission", "enabled": True},
    ]
    objects = render("metal", featureGates=gates)
    argv = local_argv(BINARY, deployment_args(objects), CONFIG, KUBECONFIG)
    flags = [a for a in argv if a.startswith("--feature-gates")]
    assert flags == ["--feature-gates=TopologyAwareScheduling=false,PartialAdmission=true"]
    assert "featureGates" not in manager_configuration(objects)  # nothing added: Kueue would refuse both


def test_gates_in_the_stacks_configuration_stay_in_the_configuration(render: Render) -> None:
    objects = render("metal", config_gates={"KueueDRAIntegrationConsumableCapacity": True})
    assert manager_configuration(objects)["featureGates"] == {"KueueDRAIntegrationConsumableCapacity": True}
    argv = local_argv(BINARY, deployment_args(objects), CONFIG, KUBECONFIG)
    assert not any(a.startswith("--feature-gates") for a in argv)


@pytest.mark.parametrize(
    ("args", "kept"),
    [
        (["--config", "/controller_manager_config.yaml", "--zap-log-level=4"], ["--zap-log-level=4"]),
        (["-config=/c.yaml", "-kubeconfig", "/in-pod", "-v"], ["-v"]),
        (["--zap-devel", "--feature-gates=A=true"], ["--zap-devel", "--feature-gates=A=true"]),
    ],
)
def test_every_spelling_of_the_local_flags_is_replaced(args: list[str], kept: list[str]) -> None:
    assert local_argv(BINARY, args, CONFIG, KUBECONFIG) == [
        str(BINARY), f"--config={CONFIG}", f"--kubeconfig={KUBECONFIG}", *kept,
    ]  # fmt: skip


def test_a_chart_without_the_manager_container_is_named(render: Render) -> None:
    objects = [o for o in render("metal") if o["kind"] != "Deployment"]
    with pytest.raises(RuntimeError, match="kueue-controller-manager"):
        deployment_args(objects)
