"""Preflight for self-healing on existing clusters: what NVSentinel's datastore needs.

gpufleet installs NVSentinel (`monitoring.selfHealing: cordon | drain`) as one atomic Helm release with its
default in-cluster MongoDB datastore (infra.monitoring.health). That datastore needs, per NVSentinel v1.29.0's
documentation:

- cert-manager: "cert-manager must be installed in the cluster before deploying mongodb-store"
  (https://docs.nvidia.com/nvsentinel/v1.29.0/configuration/mongo-db-store); its chart creates cert-manager
  Certificates and Issuers for the MongoDB TLS, so the kinds must be served;
- a StorageClass for MongoDB's PersistentVolumeClaims: "Without a valid StorageClass, PVCs cannot bind to
  storage and MongoDB pods cannot start" (runbooks/mongo-db-connection-error, v1.29.0). The chart names none,
  so the cluster's default class (`storageclass.kubernetes.io/is-default-class: "true"`, kubernetes.io
  "Change the default StorageClass") is what the claims get;
- amd64 nodes: "The Bitnami backend does not work on ARM64 nodes" (mongo-db-store, "ARM64 support"), and the
  Bitnami backend is the chart's default, the one gpufleet deploys.

Without them the release times out and rolls back and `pulumi up` fails after many minutes; preflight says so
first, with the fix, instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from infra.monitoring.health import installs_nvsentinel
from infra.preflight.findings import Finding, error, ok, warning
from infra.preflight.kube import KubernetesReader
from infra.preflight.scheduling import takes_platform_pods
from infra.preflight.storage import DEFAULT_CLASS, default_classes
from infra.spec import ClusterSpec

SUBJECT = "gpufleet:cluster.monitoring.selfHealing"
CERT_MANAGER_CRDS = ("certificates.cert-manager.io", "issuers.cert-manager.io")
ARCH_LABEL = "kubernetes.io/arch"
OFF = "or set selfHealing: off (no GPU self-healing on this cluster)"


class DatastoreReader(Protocol):
    """What the checks read: CRDs by name (None when not served), StorageClasses and Nodes as plain dicts."""

    def crd(self, name: str) -> dict[str, Any] | None: ...
    def storage_classes(self) -> Iterable[dict[str, Any]]: ...
    def nodes(self) -> Iterable[dict[str, Any]]: ...


def check_cert_manager(cluster: DatastoreReader) -> list[Finding]:
    missing = [name for name in CERT_MANAGER_CRDS if cluster.crd(name) is None]
    if not missing:
        return [
            ok(SUBJECT, "cert-manager's CRDs are served (NVSentinel's MongoDB gets its TLS certificates)")
        ]
    return [
        error(
            SUBJECT,
            f"cert-manager is not installed ({', '.join(missing)} not served): NVSentinel's MongoDB datastore "
            "needs it for its TLS certificates, so the release would fail and roll back",
            f"install cert-manager (https://cert-manager.io/docs/installation/) before deploying, {OFF}",
        )
    ]


def check_default_storage_class(cluster: DatastoreReader) -> list[Finding]:
    defaults = default_classes(cluster)
    if defaults:
        return [ok(SUBJECT, f"default StorageClass {defaults[0]} takes NVSentinel's MongoDB volumes")]
    return [
        error(
            SUBJECT,
            "no default StorageClass: NVSentinel's MongoDB PersistentVolumeClaims would stay Pending and the "
            "datastore (hence quarantine and drain) would never start",
            "install a provisioner and mark its class default (kubectl annotate storageclass <name> "
            f"{DEFAULT_CLASS}=true), {OFF}",
        )
    ]


def check_architecture(spec: ClusterSpec, cluster: DatastoreReader) -> list[Finding]:
    """MongoDB tolerates no taints, so it lands on a node that takes the platform's pods; on arm64 the Bitnami
    images do not run. All such nodes arm64 is an error; some is a warning (the scheduler may pick one)."""
    hosts = {h for pool in spec.node_pools for h in pool.hosts or []}
    candidates = [n for n in cluster.nodes() if n["metadata"]["name"] not in hosts and takes_platform_pods(n)]
    arm = sorted(
        n["metadata"]["name"]
        for n in candidates
        if (n["metadata"].get("labels") or {}).get(ARCH_LABEL) == "arm64"
    )
    if not arm:
        return [
            ok(SUBJECT, "no arm64 node would run NVSentinel's MongoDB (its Bitnami images are amd64-only)")
        ]
    shown = ", ".join(arm[:5]) + (", ..." if len(arm) > 5 else "")
    if len(arm) == len(candidates):
        return [
            error(
                SUBJECT,
                f"every node that would run NVSentinel's MongoDB is arm64 ({shown}); its default Bitnami "
                "backend does not run on arm64",
                f"add an amd64 node without taints, {OFF}",
            )
        ]
    return [
        warning(
            SUBJECT,
            f"arm64 nodes may run NVSentinel's MongoDB ({shown}); its default Bitnami backend does not run on "
            "arm64",
            f"taint or cordon them against platform pods, {OFF}",
        )
    ]


def check_nvsentinel_prerequisites(
    spec: ClusterSpec, cluster: DatastoreReader | None = None
) -> list[Finding]:
    """The three checks when the stack installs NVSentinel; a warning when the cluster cannot be read."""
    if not installs_nvsentinel(spec):
        return []
    try:
        reader = cluster or KubernetesReader(
            str(Path(spec.cluster.kubeconfig or "").expanduser()), spec.cluster.kubeconfig_context
        )
        return (
            check_cert_manager(reader)
            + check_default_storage_class(reader)
            + check_architecture(spec, reader)
        )
    except Exception as exc:  # any client or connection failure: report it, do not crash
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [
            warning(
                SUBJECT,
                f"could not read the cluster ({reason}); cert-manager, the default StorageClass and node "
                "architectures for NVSentinel not checked",
                "check that the kubeconfig and context reach the cluster, then run preflight again",
            )
        ]
