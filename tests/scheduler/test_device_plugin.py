"""The device-plugin ConfigMap: every entry hands out GPUs through CDI, never through NVIDIA_VISIBLE_DEVICES."""

from __future__ import annotations

import pytest
import yaml

from scheduler import compile
from scheduler.labels import DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE
from tests.scheduler.examples import EXAMPLES
from tests.scheduler.helpers import find

# NVIDIA k8s-device-plugin api/config/v1 (DeviceListStrategyEnvvar, ...VolumeMounts, ...CDIAnnotations,
# ...CDICRI): "envvar" passes the allocation as NVIDIA_VISIBLE_DEVICES, which a container can also set itself.
NOT_FROM_ENVIRONMENT = {"volume-mounts", "cdi-annotations", "cdi-cri"}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_every_config_entry_sets_a_device_list_strategy_other_than_envvar(example: str) -> None:
    """A config entry without `flags.plugin.deviceListStrategy` falls back to the plugin's default, `envvar`
    (k8s-device-plugin's --device-list-strategy flag); so every entry, default and per pool, names one."""
    policy, pools = EXAMPLES[example]
    configmap = find(compile(policy, pools), "ConfigMap", DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE)
    assert len(configmap["data"]) == 1 + sum(p.sharing in ("timeSlicing", "mig") for p in pools)
    for name, text in configmap["data"].items():
        strategies = yaml.safe_load(text)["flags"]["plugin"]["deviceListStrategy"]
        assert strategies and set(strategies) <= NOT_FROM_ENVIRONMENT, name


def test_kueue_stays_up_and_exposes_metrics_with_monitoring() -> None:
    """Keys of kueue chart v0.19.2 values.yaml (kubernetes-sigs/kueue charts/kueue/values.yaml):
    `controllerManager.replicas` (default 1), `controllerManager.podDisruptionBudget.{enabled,minAvailable}`
    (default off), `controllerManager.manager.priorityClassName` (default unset), top-level
    `enablePrometheus` (ServiceMonitor, default false), and `managerConfig.controllerManagerConfigYaml`
    whose `clientConnection` the chart ships as qps 300 / burst 500."""
    from dataclasses import replace

    from scheduler.kueue_config import kueue_values

    policy, _ = EXAMPLES["prod"]
    values = kueue_values(policy)
    manager = values["controllerManager"]
    assert manager["replicas"] >= 2
    assert manager["podDisruptionBudget"] == {"enabled": True, "minAvailable": 1}
    assert manager["manager"]["priorityClassName"] == "system-cluster-critical"
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["clientConnection"] == {"qps": 300, "burst": 500}
    assert values["enablePrometheus"] is False
    assert kueue_values(replace(policy, metrics=True))["enablePrometheus"] is True
