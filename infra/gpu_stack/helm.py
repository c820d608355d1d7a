"""Every Helm release the stack installs goes through `chart_release`: a pinned chart from its repository in
`infra.versions.CHART_REPOS`, at the version the spec pins, installed atomically (a failed install or upgrade
rolls back). What differs between releases (the timeout, a namespace that already exists, CRDs another
release owns) is an argument at the call site, with its reason there.

Kueue's release is the scheduler component's own (`scheduler.component`): the scheduler stands below
`infra` and cannot import this module.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.spec import ClusterSpec
from infra.versions import CHART_REPOS


def chart_version(spec: ClusterSpec, chart: str) -> str:
    """The version of `chart` the spec pins."""
    versions = spec.versions
    return {
        "gpu-operator": versions.gpu_operator_chart,
        "cluster-autoscaler": versions.cluster_autoscaler_chart,
        "aws-efa-k8s-device-plugin": versions.efa_device_plugin_chart,
        "kube-prometheus-stack": versions.kube_prometheus_stack_chart,
        "nvsentinel": versions.nvsentinel_chart,
        "karpenter": versions.karpenter_chart,
        "karpenter-crd": versions.karpenter_chart,
    }[chart]


def chart_release(
    name: str,
    spec: ClusterSpec,
    chart: str,
    namespace: str,
    opts: pulumi.ResourceOptions,
    *,
    timeout_s: int,
    values: Any = None,
    release: str | None = None,
    create_namespace: bool = True,
    cleanup_on_fail: bool = True,
    skip_crds: bool = False,
    disable_openapi_validation: bool = False,
) -> k8s.helm.v3.Release:
    """A Helm release of one of our pinned charts; the release is named after the chart unless `release` says
    otherwise. A chart in an OCI registry is addressed by its URL, one in a classic repository through
    `repository_opts` (pulumi-kubernetes helm.v3.Release). A switch left off is not sent at all (off is the
    provider's default), so the release's inputs carry only what is asked."""
    repo = CHART_REPOS[chart]
    oci = repo.startswith("oci://")
    return k8s.helm.v3.Release(
        name,
        name=release or chart,
        chart=f"{repo}/{chart}" if oci else chart,
        version=chart_version(spec, chart),
        repository_opts=None if oci else {"repo": repo},
        namespace=namespace,
        create_namespace=create_namespace or None,
        values=values,
        skip_crds=skip_crds or None,
        disable_openapi_validation=disable_openapi_validation or None,
        atomic=True,
        cleanup_on_fail=cleanup_on_fail or None,
        timeout=timeout_s,
        opts=opts,
    )
