"""`build(spec)` for the `existing` platform (Pulumi.metal.yaml) under Pulumi's mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra import build
from infra.existing.platform import kubeconfig_path
from infra.spec import ClusterSpec
from tests.conftest import load_example
from tests.infra.conftest import Mocks, after_registration, assert_scheduling_after


def _metal(**cluster: Any) -> ClusterSpec:
    spec = load_example("metal")
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update=cluster)})


def _gpu_operator(m: Mocks) -> Any:
    (release,) = [
        r for r in m.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "gpu-operator"
    ]
    return release


def _check(mocks: Mocks, spec: ClusterSpec, check: Any) -> pulumi.Output[Any]:
    outputs = build(spec)
    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_metal_creates_no_aws_resources_and_uses_the_kubeconfig(mocks: Mocks) -> pulumi.Output[Any]:
    spec = _metal(kubeconfig_context="admin@metal")

    def check(m: Mocks) -> None:
        assert m.resources, "nothing was created"
        assert not [r.typ for r in m.resources if r.typ.startswith("aws:")]
        assert not [c for c in m.calls if c[0].startswith("aws:")]
        (provider,) = m.of_type("pulumi:providers:kubernetes")
        assert provider.inputs["kubeconfig"] == str(Path("~/.kube/gpufleet-metal.yaml").expanduser())
        assert provider.inputs["context"] == "admin@metal"
        release = _gpu_operator(m)
        assert release.provider and release.provider.startswith(provider.urn)
        values = release.inputs["values"]
        assert values["driver"] == {"enabled": False} and values["toolkit"] == {"enabled": False}
        assert values["devicePlugin"]["config"]["name"] == "gpufleet-device-plugin-config"
        assert_scheduling_after(m, release)
        patches = {r.inputs["metadata"]["name"]: r for r in m.of_type("kubernetes:core/v1:NodePatch")}
        assert sorted(patches) == sorted(h for p in spec.node_pools for h in p.hosts or [])
        l40s = patches["gpu-l40s-01"].inputs["metadata"]["labels"]
        assert l40s["gpufleet.io/pool"] == "l40s" and l40s["nvidia.com/device-plugin.config"] == "l40s"
        assert patches["gpu-h100-01"].inputs["metadata"]["labels"]["gpufleet.io/gpu-model"] == "H100"
        assert "spec" not in patches["gpu-h100-01"].inputs  # labels only: taints stay the node owner's
        assert {p.urn for p in patches.values()} <= set(release.dependencies)

    return _check(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_metal_operator_managed_driver(mocks: Mocks) -> pulumi.Output[Any]:
    spec = _metal(driver_managed_by="operator")

    def check(m: Mocks) -> None:
        release = _gpu_operator(m)
        driver = release.inputs["values"]["driver"]
        assert driver["enabled"] is True and driver["version"] == spec.versions.nvidia_driver_branch
        assert release.inputs["values"]["toolkit"]["enabled"] is True

    return _check(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_metal_outputs(mocks: Mocks) -> pulumi.Output[Any]:
    outputs = build(load_example("metal"))
    assert outputs["cluster_name"] == "gpufleet-metal" and outputs["platform"] == "existing"
    return after_registration(lambda: len(mocks.resources))


def test_relative_kubeconfig_paths_are_relative_to_the_project(repo_root: Path) -> None:
    assert kubeconfig_path("kube/config") == str(repo_root / "kube/config")
    assert kubeconfig_path("/etc/k.yaml") == "/etc/k.yaml"


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_a_bad_scheduling_policy_never_reaches_pulumi(mocks: Mocks) -> pulumi.Output[Any]:
    from infra.errors import ConfigError

    spec = load_example("metal")
    spec = spec.model_copy(
        update={"scheduling": spec.scheduling.model_copy(update={"provisioning_requests": True})}
    )
    with pytest.raises(ConfigError, match="provisioningRequests"):
        build(spec)
    return after_registration(lambda: _assert_nothing(mocks))


def _assert_nothing(mocks: Mocks) -> None:
    assert mocks.resources == []
