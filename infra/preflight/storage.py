"""Preflight on existing clusters: a StorageClass that takes Prometheus' volume claim.

With `monitoring.prometheus: install` the chart's Prometheus gets a PersistentVolumeClaim from its
volumeClaimTemplate (infra.monitoring.stack.storage_spec). Without `monitoring.storage.storageClass` the claim
names no class, so the cluster's default StorageClass (`storageclass.kubernetes.io/is-default-class: "true"`,
kubernetes.io "Change the default StorageClass") provisions it; a cluster with none leaves it Pending for ever
and Prometheus never starts. A class the stack names must exist. On aws the stack installs the class itself
(infra.aws.addons.ebs_csi), so this is for clusters gpufleet did not create.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from infra.preflight.findings import Finding, error, ok, warning
from infra.preflight.kube import KubernetesReader
from infra.spec import ClusterSpec

SUBJECT = "gpufleet:cluster.monitoring.storage"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT_CLASS = (
    "storageclass.beta.kubernetes.io/is-default-class"  # still honoured by the admission plugin
)


class StorageReader(Protocol):
    def storage_classes(self) -> Iterable[dict[str, Any]]: ...


def is_default_class(storage_class: dict[str, Any]) -> bool:
    annotations = storage_class.get("metadata", {}).get("annotations") or {}
    return any(annotations.get(key) == "true" for key in (DEFAULT_CLASS, BETA_DEFAULT_CLASS))


def default_classes(cluster: StorageReader) -> list[str]:
    return sorted(c["metadata"]["name"] for c in cluster.storage_classes() if is_default_class(c))


def check_prometheus_storage(storage_class: str | None, cluster: StorageReader) -> list[Finding]:
    """The class Prometheus' claim will get: the one named, or the cluster's default; an error when none."""
    names = sorted(c["metadata"]["name"] for c in cluster.storage_classes())
    if storage_class:
        if storage_class in names:
            return [ok(SUBJECT, f"StorageClass {storage_class} takes Prometheus' volume")]
        return [
            error(
                SUBJECT,
                f"storageClass {storage_class!r} does not exist on the cluster (classes: "
                f"{', '.join(names) or 'none'}): Prometheus' PersistentVolumeClaim would stay Pending",
                "set gpufleet:cluster.monitoring.storage.storageClass to one of the cluster's classes",
            )
        ]
    defaults = default_classes(cluster)
    if defaults:
        return [ok(SUBJECT, f"default StorageClass {defaults[0]} takes Prometheus' volume")]
    return [
        error(
            SUBJECT,
            "prometheus: install without storage.storageClass, and the cluster has no default StorageClass "
            f"(classes: {', '.join(names) or 'none'}): Prometheus' PersistentVolumeClaim would stay Pending and "
            "Prometheus would never start",
            "set gpufleet:cluster.monitoring.storage.storageClass to one of the cluster's classes, or mark one "
            f"default (kubectl annotate storageclass <name> {DEFAULT_CLASS}=true)",
        )
    ]


def check_monitoring_storage(spec: ClusterSpec, cluster: StorageReader | None = None) -> list[Finding]:
    """On `prometheus: install`; a warning when the cluster cannot be read (the cluster checks say so as an
    error already)."""
    mon = spec.cluster.monitoring
    if mon.prometheus != "install":
        return []
    try:
        reader = cluster or KubernetesReader(
            str(Path(spec.cluster.kubeconfig or "").expanduser()), spec.cluster.kubeconfig_context
        )
        return check_prometheus_storage(mon.storage.storage_class, reader)
    except Exception as exc:  # any client or connection failure: report it, do not crash
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [
            warning(
                SUBJECT,
                f"could not read the cluster's StorageClasses ({reason}); Prometheus' storage not checked",
                "check that the kubeconfig and context reach the cluster, then run preflight again",
            )
        ]
