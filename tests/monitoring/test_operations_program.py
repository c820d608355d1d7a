"""The operations side inside `build(spec)` under Pulumi's mocks: what is installed, in which order, where."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra import build
from infra.spec import ClusterSpec
from tests.conftest import load_example
from tests.infra.conftest import Mocks, after_registration


def _metal(**monitoring: Any) -> ClusterSpec:
    spec = load_example("metal")
    mon = spec.cluster.monitoring.model_copy(update=monitoring)
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"monitoring": mon})})


def _releases(m: Mocks) -> dict[str, Any]:
    return {r.inputs["name"]: r for r in m.of_type("kubernetes:helm.sh/v3:Release")}


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_install_puts_the_metrics_stack_before_the_gpu_operator(mocks: Mocks) -> pulumi.Output[Any]:
    spec = _metal(prometheus="install", grafana=True, self_healing="drain")
    build(spec)

    def check(m: Mocks) -> None:
        releases = _releases(m)
        kps, operator = releases["kube-prometheus-stack"], releases["gpu-operator"]
        assert kps.inputs["version"] == spec.versions.kube_prometheus_stack_chart == "88.5.3"
        assert kps.inputs["namespace"] == "monitoring"
        assert (
            kps.urn in operator.dependencies
        )  # the ServiceMonitor CRD exists before dcgm-exporter's monitor
        assert kps.provider == operator.provider
        nvs = releases["nvsentinel"]
        assert nvs.inputs["chart"] == "oci://ghcr.io/nvidia/nvsentinel"
        assert nvs.inputs["version"] == spec.versions.nvsentinel_chart
        assert nvs.inputs["values"]["global"]["nodeDrainer"] == {"enabled": True}
        assert operator.inputs["values"]["dcgm"] == {"enabled": True}  # NVSentinel reads standalone DCGM
        kueue = releases["kueue"]
        groups = m.of_type("kubernetes:yaml/v2:ConfigGroup")
        ops = [
            g for g in groups if g.inputs["objs"][0].get("apiVersion", "").startswith("monitoring.coreos.com")
        ]
        assert {o.inputs["objs"][0]["kind"] for o in ops} == {"PrometheusRule", "ServiceMonitor"}
        for group in ops:
            assert kueue.urn in group.dependencies and operator.urn in group.dependencies
        dashboards = [
            g
            for g in groups
            if g.inputs["objs"][0].get("metadata", {}).get("labels", {}).get("grafana_dashboard")
        ]
        assert len(dashboards) == 3

    return after_registration(lambda: check(mocks))


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_none_and_off_install_nothing_extra(mocks: Mocks) -> pulumi.Output[Any]:
    build(_metal(prometheus="none", self_healing="off"))

    def check(m: Mocks) -> None:
        assert set(_releases(m)) == {"gpu-operator", "kueue"}
        assert not [
            g for g in m.of_type("kubernetes:yaml/v2:ConfigGroup") if "monitoring.coreos.com" in str(g.inputs)
        ]

    return after_registration(lambda: check(mocks))


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_aws_relies_on_eks_node_health_not_nvsentinel(mocks: Mocks) -> pulumi.Output[Any]:
    build(load_example("example-prod"))  # prometheus: install on the cluster the stack creates

    def check(m: Mocks) -> None:
        releases = _releases(m)
        assert "nvsentinel" not in releases and "kube-prometheus-stack" in releases
        kinds = {
            g.inputs["objs"][0]["kind"]
            for g in m.of_type("kubernetes:yaml/v2:ConfigGroup")
            if g.inputs["objs"][0]["apiVersion"].startswith("monitoring.coreos.com")
        }
        assert kinds == {"PrometheusRule", "ServiceMonitor"}

    return after_registration(lambda: check(mocks))


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_the_monitoring_namespace_is_the_stacks_own_and_comes_before_the_release(
    mocks: Mocks,
) -> pulumi.Output[Any]:
    """A namespace Helm creates (`create_namespace`) is never removed by an uninstall, and Pulumi's destroy knows
    nothing of it; as a Pulumi Namespace it exists before the release (the receivers' Secrets can go in it
    first) and is deleted in destroy's namespace phase (infra.deploy.destroy_phases) with what is left in it."""
    from infra.deploy import destroy_phases

    build(_metal(prometheus="install", namespace="metrics"))

    def check(m: Mocks) -> None:
        kps = _releases(m)["kube-prometheus-stack"]
        (namespace,) = [
            n for n in m.of_type("kubernetes:core/v1:Namespace") if n.inputs["metadata"]["name"] == "metrics"
        ]
        assert namespace.inputs["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpufleet"}
        assert namespace.urn in kps.dependencies
        assert not kps.inputs.get("createNamespace")
        state = [{"type": r.typ, "urn": r.urn, "custom": True} for r in (namespace, kps)]
        assert destroy_phases(state) == [[kps.urn], [namespace.urn]]

    return after_registration(lambda: check(mocks))
