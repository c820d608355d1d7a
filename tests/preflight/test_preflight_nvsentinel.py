"""NVSentinel prerequisites on existing clusters, with the cluster as plain API objects; the same checks
against a real API server are in tests/twin/test_nvsentinel_prereqs.py."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from infra.preflight.findings import Severity
from infra.preflight.nvsentinel import check_nvsentinel_prerequisites
from infra.spec import ClusterSpec
from tests.conftest import load_example

TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def _node(name: str, arch: str = "amd64", taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/arch": arch}},
        "spec": {"taints": taints or []},
    }


def _class(
    name: str, default: str | None, key: str = "storageclass.kubernetes.io/is-default-class"
) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {key: default} if default else {}}}


@dataclass
class Cluster:
    crds: set[str] = field(
        default_factory=lambda: {"certificates.cert-manager.io", "issuers.cert-manager.io"}
    )
    classes: list[dict[str, Any]] = field(default_factory=lambda: [_class("local-path", "true")])
    node_list: list[dict[str, Any]] = field(default_factory=lambda: [_node("cpu-1"), _node("cpu-2")])

    def crd(self, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}} if name in self.crds else None

    def storage_classes(self) -> Iterable[dict[str, Any]]:
        return self.classes

    def nodes(self) -> Iterable[dict[str, Any]]:
        return self.node_list


def _metal(self_healing: str = "cordon") -> ClusterSpec:
    spec = load_example("metal")
    monitoring = spec.cluster.monitoring.model_copy(update={"self_healing": self_healing})
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"monitoring": monitoring})})


def _errors(cluster: Cluster, spec: ClusterSpec | None = None) -> list[str]:
    return [f.message for f in check_nvsentinel_prerequisites(spec or _metal(), cluster) if f.is_error]


def test_a_ready_cluster_passes() -> None:
    findings = check_nvsentinel_prerequisites(_metal(), Cluster())
    assert len(findings) == 3 and {f.severity for f in findings} == {Severity.OK}


def test_self_healing_off_checks_nothing() -> None:
    assert check_nvsentinel_prerequisites(_metal("off"), Cluster(crds=set(), classes=[])) == []


def test_cert_manager_must_be_installed() -> None:
    """docs.nvidia.com/nvsentinel/v1.29.0/configuration/mongo-db-store: "cert-manager must be installed in the
    cluster before deploying mongodb-store"."""
    (only,) = _errors(Cluster(crds={"certificates.cert-manager.io"}))
    assert "cert-manager is not installed (issuers.cert-manager.io not served)" in only


def test_a_default_storage_class_is_needed() -> None:
    """docs.nvidia.com/nvsentinel/v1.29.0/runbooks/mongo-db-connection-error: without a StorageClass the PVCs
    cannot bind and MongoDB cannot start. A class that is not the default does not count (the chart names none);
    the beta annotation still marks a default (kubernetes.io, "Change the default StorageClass")."""
    assert _errors(Cluster(classes=[_class("slow", None), _class("fast", "false")])) == [
        "no default StorageClass: NVSentinel's MongoDB PersistentVolumeClaims would stay Pending and the datastore "
        "(hence quarantine and drain) would never start"
    ]
    beta = _class("old", "true", "storageclass.beta.kubernetes.io/is-default-class")
    assert _errors(Cluster(classes=[beta])) == []


def test_arm64_platform_nodes_cannot_run_the_bitnami_datastore() -> None:
    """docs.nvidia.com/nvsentinel/v1.29.0/configuration/mongo-db-store, "ARM64 support": the Bitnami backend
    does not work on ARM64 nodes. Only nodes MongoDB could land on count: tainted GPU hosts do not."""
    spec = _metal()
    host = spec.node_pools[0].hosts[0]  # type: ignore[index]
    arm_gpu = Cluster(node_list=[_node("cpu-1"), _node(host, "arm64", [TAINT])])
    assert check_nvsentinel_prerequisites(spec, arm_gpu)[-1].severity is Severity.OK
    (only,) = _errors(Cluster(node_list=[_node("arm-1", "arm64"), _node("arm-2", "arm64")]))
    assert "every node that would run NVSentinel's MongoDB is arm64 (arm-1, arm-2)" in only
    mixed = check_nvsentinel_prerequisites(spec, Cluster(node_list=[_node("cpu-1"), _node("arm-1", "arm64")]))
    assert mixed[-1].severity is Severity.WARNING and "arm-1" in mixed[-1].message


def test_an_unreadable_cluster_is_a_warning(tmp_path: Any) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    spec = _metal()
    spec = spec.model_copy(
        update={"cluster": spec.cluster.model_copy(update={"kubeconfig": str(kubeconfig)})}
    )
    (only,) = check_nvsentinel_prerequisites(spec)
    assert only.severity is Severity.WARNING and "not checked" in only.message
