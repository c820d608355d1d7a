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

from infra.gpu_stack.helm import chart_release
from infra.monitoring.health import NAMESPACE as NVSENTINEL_NAMESPACE
from infra.monitoring.health import RELEASE as NVSENTINEL_RELEASE
from infra.monitoring.health import installs_nvsentinel, nvsentinel_values
from infra.monitoring.render import object_file
from infra.monitoring.stack import kube_prometheus_stack_values, monitoring_objects
from infra.spec import ClusterSpec
from scheduler.labels import MANAGED_BY

KPS = "kube-prometheus-stack"


def metrics_stack(name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release | None:
    """The kube-prometheus-stack release on `prometheus: install` (its release name is `monitoring.release`),
    in a namespace of the stack's own: created first, so the Secrets Alertmanager's receivers read can be put
    there before the release (or between two deploys), and deleted by destroy with everything left in it (a
    namespace Helm creates is never removed by an uninstall)."""
    mon = spec.cluster.monitoring
    if mon.prometheus != "install":
        return None
    namespace = k8s.core.v1.Namespace(
        f"{name}-namespace",
        metadata={"name": mon.namespace, "labels": dict(MANAGED_BY)},
        opts=opts,
    )
    return chart_release(
        name,
        spec,
        KPS,
        mon.namespace,
        pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[namespace])),
        release=mon.release,
        values=kube_prometheus_stack_values(spec),
        timeout_s=900,
        create_namespace=False,
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
            self.nvsentinel = chart_release(
                f"{name}-nvsentinel",
                spec,
                "nvsentinel",
                NVSENTINEL_NAMESPACE,
                pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
                release=NVSENTINEL_RELEASE,
                values=nvsentinel_values(spec),
                timeout_s=900,
            )
        self.register_outputs({"objects": len(self.objects)})
