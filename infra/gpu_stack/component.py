"""The in-cluster GPU stack every platform installs: the NVIDIA GPU operator, then the scheduling layer.

The `existing` platform is exactly this on a kubeconfig's cluster; the AWS platform adds its cloud add-ons
(autoscaler, EFA) beside it. Charts come from `infra.versions` (version and repository), never "latest",
through one helper (`infra.gpu_stack.helm`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from infra.gpu_stack.gpu_operator import gpu_operator_values
from infra.gpu_stack.helm import chart_release
from infra.gpu_stack.operations import Operations, metrics_stack
from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from scheduler.component import GpuScheduling
from scheduler.labels import GPU_OPERATOR_NAMESPACE


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
                # Explicit on the release (a component's own dependencies do not reach its children).
                pulumi.ResourceOptions(parent=self, provider=provider, depends_on=after_metrics),
                values=gpu_operator_values(spec),
                # The chart upgrades its CRDs in a pre-upgrade hook (`operator.upgradeCRD: true`), which "requires
                # --disable-openapi-validation" (deployments/gpu-operator/values.yaml:87-89 at v26.7.0): Helm
                # checks the new ClusterPolicy against the old CRD before any hook runs, so a bump across a
                # release that added ClusterPolicy fields fails validation and rolls back without it.
                disable_openapi_validation=True,
                timeout_s=1200,  # the operator's validator waits for GPU nodes' drivers; cold GPU nodes are slow
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
