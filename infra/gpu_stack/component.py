"""The in-cluster GPU stack every platform installs: the NVIDIA GPU operator, then the scheduling layer.

The `existing` platform is exactly this on a kubeconfig's cluster; the AWS platform adds its cloud add-ons
(autoscaler, EFA) beside it. Charts come from `infra.versions` (version and repository), never "latest".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.gpu_stack.gpu_operator import gpu_operator_values
from infra.gpu_stack.operations import Operations, metrics_stack
from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from infra.versions import CHART_REPOS
from scheduler.component import GpuScheduling
from scheduler.labels import GPU_OPERATOR_NAMESPACE

HELM_TIMEOUT_S = 1200  # the operator's validator waits for GPU nodes' drivers; cold GPU nodes are slow


def chart_version(spec: ClusterSpec, chart: str) -> str:
    versions = spec.versions
    return {
        "gpu-operator": versions.gpu_operator_chart,
        "cluster-autoscaler": versions.cluster_autoscaler_chart,
        "aws-efa-k8s-device-plugin": versions.efa_device_plugin_chart,
    }[chart]


def chart_release(
    name: str,
    spec: ClusterSpec,
    chart: str,
    namespace: str,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
) -> k8s.helm.v3.Release:
    """A helm release of one of our pinned charts (name of the release = name of the chart)."""
    return k8s.helm.v3.Release(
        name,
        name=chart,
        chart=chart,
        version=chart_version(spec, chart),
        repository_opts={"repo": CHART_REPOS[chart]},
        namespace=namespace,
        create_namespace=True,
        values=values,
        atomic=True,
        cleanup_on_fail=True,
        timeout=HELM_TIMEOUT_S,
        opts=opts,
    )


class GpuStack(pulumi.ComponentResource):
    """GPU operator + scheduler component on the given Kubernetes provider, after `depends_on` (the nodes)."""

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        provider: k8s.Provider,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpufleet:k8s:GpuStack", name, None, opts)
        # The metrics stack first (monitoring.prometheus: install): its CRDs carry dcgm-exporter's monitor.
        self.metrics = metrics_stack(
            f"{name}-metrics",
            spec,
            pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(depends_on)),
        )
        after_metrics = [*depends_on, *([self.metrics] if self.metrics else [])]
        # `cluster.addons.gpuOperator: existing`: the cluster runs the operator already; adopt it.
        self.gpu_operator: k8s.helm.v3.Release | None = None
        if spec.cluster.addons.gpu_operator == "install":
            self.gpu_operator = chart_release(
                f"{name}-gpu-operator",
                spec,
                "gpu-operator",
                GPU_OPERATOR_NAMESPACE,
                gpu_operator_values(spec),
                # Explicit on the release (a component's own dependencies do not reach its children).
                pulumi.ResourceOptions(parent=self, provider=provider, depends_on=after_metrics),
            )
        operator = [self.gpu_operator] if self.gpu_operator else after_metrics
        policy, pools = scheduler_inputs(spec)
        # The scheduling objects target the operator's device-plugin config and the GPU nodes it labels.
        self.scheduling = GpuScheduling(
            f"{name}-scheduling",
            policy,
            pools,
            install_kueue=spec.cluster.addons.kueue == "install",
            external_dependencies=operator,
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        # Rules, monitors, dashboards and NVSentinel once the operator and Kueue (its namespace) are there.
        self.operations = Operations(
            f"{name}-operations",
            spec,
            depends_on=[*operator, *self.scheduling.ready],
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        self.register_outputs({"gpu_operator": self.gpu_operator.status if self.gpu_operator else "existing"})
