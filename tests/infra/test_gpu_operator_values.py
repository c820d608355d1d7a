"""GPU operator values: every key exists in the chart, and the ClusterPolicy they render passes the upstream CRD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from infra.gpu_stack.gpu_operator import ADMITTED_POD_SELECTOR, gpu_operator_values
from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from tests.conftest import EXAMPLE_STACKS, load_example
from tests.infra.clusterpolicy import cluster_policy, deep_merge, missing_keys


@pytest.fixture(scope="module")
def chart_values(shared_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((shared_dir / "crds/gpu-operator/values.yaml").read_text())


@pytest.fixture(scope="module")
def policy_schema(shared_dir: Path) -> dict[str, Any]:
    crd = yaml.safe_load((shared_dir / "crds/gpu-operator/nvidia.com_clusterpolicies.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    return version["schema"]["openAPIV3Schema"]


def _operator_driver_metal() -> ClusterSpec:
    spec = load_example("metal")
    return spec.model_copy(
        update={"cluster": spec.cluster.model_copy(update={"driver_managed_by": "operator"})}
    )


def _specs() -> list[tuple[str, ClusterSpec]]:
    return [
        *((s, load_example(s)) for s in EXAMPLE_STACKS),
        ("metal-operator-driver", _operator_driver_metal()),
    ]


@pytest.mark.parametrize(("name", "spec"), _specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_values_use_only_chart_keys_and_render_a_valid_cluster_policy(
    name: str, spec: ClusterSpec, chart_values: dict[str, Any], policy_schema: dict[str, Any]
) -> None:
    values = gpu_operator_values(spec)
    assert missing_keys(values, chart_values) == []
    policy = cluster_policy(deep_merge(chart_values, values))
    jsonschema.validate(policy, policy_schema)


def test_the_schema_check_catches_a_bad_value(
    chart_values: dict[str, Any], policy_schema: dict[str, Any]
) -> None:
    values = deep_merge(gpu_operator_values(load_example("dev")), {"mig": {"strategy": "split"}})
    with pytest.raises(jsonschema.ValidationError, match="split"):
        jsonschema.validate(cluster_policy(deep_merge(chart_values, values)), policy_schema)
    assert missing_keys({"devicePlugin": {"confg": {}}}, chart_values) == ["devicePlugin.confg"]


def test_eks_nodes_bring_their_driver_and_toolkit() -> None:
    for stack in ("dev", "example-prod"):
        values = gpu_operator_values(load_example(stack))
        assert values["driver"] == {"enabled": False}
        assert values["toolkit"] == {"enabled": False}
        assert values["devicePlugin"]["enabled"] is True


def test_device_plugin_reads_the_schedulers_config_map() -> None:
    config = gpu_operator_values(load_example("example-prod"))["devicePlugin"]["config"]
    assert config == {"create": False, "name": "gpufleet-device-plugin-config", "default": "default"}


def test_mig_pools_switch_to_the_mixed_strategy() -> None:
    prod = gpu_operator_values(load_example("example-prod"))  # has an H100 MIG pool
    assert prod["mig"]["strategy"] == "mixed" and prod["migManager"]["enabled"] is True
    dev = gpu_operator_values(load_example("dev"))
    assert dev["mig"]["strategy"] == "single" and dev["migManager"]["enabled"] is False


def test_service_monitor_follows_monitoring() -> None:
    assert (
        gpu_operator_values(load_example("example-prod"))["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    )
    assert gpu_operator_values(load_example("dev"))["dcgmExporter"]["serviceMonitor"]["enabled"] is False


def test_operands_tolerate_the_gpu_taint_and_the_pools_taints() -> None:
    config = {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {"name": "c"},
        "gpufleet:nodePools": [
            {
                "name": "a",
                "instanceType": "g5.xlarge",
                "maxSize": 1,
                "taints": [{"key": "team", "value": "x"}],
            },
            {
                "name": "b",
                "instanceType": "g5.xlarge",
                "maxSize": 1,
                "taints": [{"key": "team", "value": "y"}],
            },
        ],
    }
    tolerations = gpu_operator_values(parse_config(config, "t"))["daemonsets"]["tolerations"]
    assert tolerations == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "team", "operator": "Exists", "effect": "NoSchedule"},
    ]


def test_operator_installs_the_driver_only_when_asked() -> None:
    assert gpu_operator_values(load_example("metal"))["driver"] == {"enabled": False}
    spec = _operator_driver_metal()
    values = gpu_operator_values(spec)
    assert values["driver"] == {
        "enabled": True,
        "usePrecompiled": True,
        "version": spec.versions.nvidia_driver_branch,
        "upgradePolicy": {"waitForCompletion": {"podSelector": ADMITTED_POD_SELECTOR, "timeoutSeconds": 0}},
    }
    assert values["toolkit"] == {"enabled": True}


def test_a_driver_upgrade_waits_for_admitted_jobs_where_the_chart_waits_for_none(shared_dir: Path) -> None:
    """gpu-operator v26.7.0 values.yaml:167-198: no pod is waited for and GPU pods are deleted after 300 s; the
    ClusterPolicy CRD says a waitForCompletion timeout of 0 is infinite. (tests/twin/test_upgrade.py shows the
    selected label on the pods of a job the real Kueue admitted.)"""
    chart = yaml.safe_load((shared_dir / "crds" / "gpu-operator" / "values.yaml").read_text())
    assert chart["driver"]["upgradePolicy"]["waitForCompletion"] == {"timeoutSeconds": 0, "podSelector": ""}
    crd = yaml.safe_load(
        (shared_dir / "crds" / "gpu-operator" / "nvidia.com_clusterpolicies.yaml").read_text()
    )
    driver = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "driver"
    ]
    timeout = driver["properties"]["upgradePolicy"]["properties"]["waitForCompletion"]["properties"][
        "timeoutSeconds"
    ]
    assert "zero means infinite" in " ".join(timeout["description"].split())
    wait = gpu_operator_values(_operator_driver_metal())["driver"]["upgradePolicy"]["waitForCompletion"]
    assert wait["podSelector"] == ADMITTED_POD_SELECTOR and wait["timeoutSeconds"] == 0


@pytest.mark.parametrize("stack", ["dev", "example-prod"])
def test_device_plugin_config_names_exist_in_the_schedulers_config_map(stack: str) -> None:
    """The operator's default entry and every node group's config label name a key the scheduler writes."""
    from infra.aws.nodepools import plan_node_groups
    from infra.scheduling import scheduler_inputs
    from scheduler.compiler import compile

    spec = load_example(stack)
    values = gpu_operator_values(spec)["devicePlugin"]["config"]
    (configmap,) = [
        o
        for o in compile(*scheduler_inputs(spec))
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == values["name"]
    ]
    assert values["default"] in configmap["data"]
    wanted = {
        p.labels["nvidia.com/device-plugin.config"]
        for p in plan_node_groups(spec)
        if "nvidia.com/device-plugin.config" in p.labels
    }
    assert wanted <= set(configmap["data"])
    assert configmap["metadata"]["namespace"] == "gpu-operator"


def test_dcgm_exporter_config_is_the_charts_documented_custom_metrics_block(shared_dir: Path) -> None:
    """`dcgmExporter.config` is commented out in values.yaml (v26.7.0), which documents `name`, `create: true`
    and `data` (CSV, key `dcgm-metrics.csv`) as the way to ship a custom metric list; we use exactly those."""
    text = (shared_dir / "crds/gpu-operator/values.yaml").read_text()
    block = text[text.index("  # DCGM Exporter configuration") : text.index("\ngfd:")]
    for documented in ("# config:", "# name: custom-dcgm-exporter-metrics", "# create: true", "# data: |-"):
        assert documented in block
    config = gpu_operator_values(load_example("example-prod"))["dcgmExporter"]["config"]
    assert set(config) == {"name", "create", "data"} and config["create"] is True
