"""Operations: the pinned kube-prometheus-stack (install), gpufleet's rules/monitors/dashboards, NVSentinel.

A thin component over the pure builders. The metrics stack is created first (before the GPU operator) so the
ServiceMonitor CRD exists when the operator creates dcgm-exporter's monitor; gpufleet's objects come after
the scheduling layer (the Kueue monitor lives in Kueue's namespace).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.yaml.v2 import ConfigGroup

from infra.monitoring.health import NAMESPACE as NVSENTINEL_NAMESPACE
from infra.monitoring.health import RELEASE as NVSENTINEL_RELEASE
from infra.monitoring.health import installs_nvsentinel, nvsentinel_values
from infra.monitoring.render import object_file
from infra.monitoring.stack import kube_prometheus_stack_values, monitoring_objects
from infra.spec import ClusterSpec
from infra.versions import CHART_REPOS

KPS = "kube-prometheus-stack"
HELM_TIMEOUT_S = 900


def metrics_stack(name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release | None:
    """The kube-prometheus-stack release on `prometheus: install` (its release name is `monitoring.release`)."""
    mon = spec.cluster.monitoring
    if mon.prometheus != "install":
        return None
    return k8s.helm.v3.Release(
        name,
        name=mon.release,
        chart=KPS,
        version=spec.versions.kube_prometheus_stack_chart,
        repository_opts={"repo": CHART_REPOS[KPS]},
        namespace=mon.namespace,
        create_namespace=True,
        values=kube_prometheus_stack_values(spec),
        atomic=True,
        cleanup_on_fail=True,
        timeout=HELM_TIMEOUT_S,
        opts=opts,
    )


class Operations(pulumi.ComponentResource):
    """gpufleet's monitoring objects and, on existing clusters, NVSentinel; after `depends_on`."""

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpufleet:k8s:Operations", name, None, opts)
        self.objects: dict[str, ConfigGroup] = {}
        for obj in monitoring_objects(spec):
            key = object_file(obj).removesuffix(".yaml")
            self.objects[key] = ConfigGroup(
                f"{name}-{key}",
                objs=[obj],
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
            )
        self.nvsentinel: k8s.helm.v3.Release | None = None
        if installs_nvsentinel(spec):
            self.nvsentinel = k8s.helm.v3.Release(
                f"{name}-nvsentinel",
                name=NVSENTINEL_RELEASE,
                chart=f"{CHART_REPOS['nvsentinel']}/nvsentinel",
                version=spec.versions.nvsentinel_chart,
                namespace=NVSENTINEL_NAMESPACE,
                create_namespace=True,
                values=nvsentinel_values(spec),
                atomic=True,
                cleanup_on_fail=True,
                timeout=HELM_TIMEOUT_S,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
            )
        self.register_outputs({"objects": len(self.objects)})
