"""Prometheus' storage on existing clusters, with the cluster's StorageClasses as plain API objects; the same
check against a real API server (which has no StorageClass) is in tests/twin/test_monitoring_ready.py."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from infra.preflight.findings import Severity
from infra.preflight.storage import check_monitoring_storage
from infra.spec import ClusterSpec
from tests.conftest import load_example


def _class(name: str, default: str | None = None, beta: bool = False) -> dict[str, Any]:
    key = f"storageclass{'.beta' if beta else ''}.kubernetes.io/is-default-class"
    return {"metadata": {"name": name, "annotations": {key: default} if default else {}}}


@dataclass
class Classes:
    items: list[dict[str, Any]] = field(default_factory=list)

    def storage_classes(self) -> Iterable[dict[str, Any]]:
        return self.items


def _metal(prometheus: str = "install", storage_class: str | None = None) -> ClusterSpec:
    spec = load_example("metal")
    storage = spec.cluster.monitoring.storage.model_copy(update={"storage_class": storage_class})
    mon = spec.cluster.monitoring.model_copy(update={"prometheus": prometheus, "storage": storage})
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"monitoring": mon})})


def test_prometheus_without_a_class_on_a_cluster_without_a_default_is_refused() -> None:
    """The claim names no class, so only a default class provisions it (kubernetes.io, "Change the default
    StorageClass"); a class that is not the default does not count."""
    (finding,) = check_monitoring_storage(_metal(), Classes([_class("slow"), _class("fast", "false")]))
    assert finding.severity is Severity.ERROR
    assert finding.subject == "gpufleet:cluster.monitoring.storage"
    assert "no default StorageClass (classes: fast, slow)" in finding.message
    assert "storage.storageClass" in finding.fix


def test_a_default_class_or_a_named_one_that_exists_passes() -> None:
    (default,) = check_monitoring_storage(
        _metal(), Classes([_class("slow"), _class("local", "true", beta=True)])
    )
    assert default.severity is Severity.OK and "local" in default.message
    (named,) = check_monitoring_storage(_metal(storage_class="slow"), Classes([_class("slow")]))
    assert named.severity is Severity.OK and "slow" in named.message


def test_a_named_class_that_does_not_exist_is_refused() -> None:
    (finding,) = check_monitoring_storage(_metal(storage_class="gp3"), Classes([_class("local", "true")]))
    assert finding.severity is Severity.ERROR
    assert "storageClass 'gp3' does not exist on the cluster (classes: local)" in finding.message


def test_nothing_is_checked_without_an_installed_prometheus() -> None:
    assert check_monitoring_storage(_metal("existing"), Classes()) == []
