"""The deploy's wait for the metrics stack against the twin's real API server, StatefulSet controller, scheduler
and PersistentVolume controller: a Prometheus whose volume claim nothing binds fails the wait with the claim's
reason; once a volume binds it, the pod is scheduled, runs, and the wait returns.

The twin (like a fresh cluster without a CSI driver) has no StorageClass, so a claim without a class stays
Pending and the scheduler leaves the pod unscheduled. The StatefulSets are the shape the Prometheus operator
gives them (its pod labels, prometheus-operator v0.93.0 pkg/prometheus/server/operator.go:1696-1703,
pkg/alertmanager/operator.go:797-802; the volumeClaimTemplate of `prometheusSpec.storageSpec`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from infra.errors import CheckFailed
from infra.monitoring.readiness import Watched, wait_ready, watched
from infra.preflight.kube import KubernetesReader
from infra.preflight.storage import check_monitoring_storage
from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from tests.conftest import ROOT
from tests.twin.kube import Kube


def _spec() -> ClusterSpec:
    spec = load_stack(ROOT / "Pulumi.metal.yaml")
    mon = spec.cluster.monitoring.model_copy(update={"prometheus": "install", "namespace": "ready-check"})
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"monitoring": mon})})


def _statefulset(target: Watched, namespace: str, claim: bool) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": target.component, "app.kubernetes.io/instance": target.resource}
    template: dict[str, Any] = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": target.component, "image": f"{target.component}:twin"}]},
    }
    spec: dict[str, Any] = {
        "serviceName": f"{target.component}-operated",
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": template,
    }
    if claim:
        template["spec"]["containers"][0]["volumeMounts"] = [{"name": "db", "mountPath": "/prometheus"}]
        spec["volumeClaimTemplates"] = [
            {
                "metadata": {"name": "db"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}},
            }
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": f"{target.component}-{target.resource}", "namespace": namespace},
        "spec": spec,
    }


@pytest.fixture
def stack(metal_twin: Kube) -> Iterator[ClusterSpec]:
    spec = _spec()
    ns = spec.cluster.monitoring.namespace
    assert metal_twin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).ok
    yield spec
    metal_twin.attempt("delete", "namespace", ns, "--wait=false")
    metal_twin.attempt("delete", "pv", "ready-check-volume", "--ignore-not-found", "--wait=false")


def test_a_prometheus_volume_nothing_binds_fails_the_wait_then_a_bound_one_passes(
    metal_twin: Kube, stack: ClusterSpec
) -> None:
    ns = stack.cluster.monitoring.namespace
    prometheus, alertmanager = watched(stack)
    assert metal_twin.create(_statefulset(prometheus, ns, claim=True)).ok
    assert metal_twin.create(_statefulset(alertmanager, ns, claim=False)).ok
    reader = KubernetesReader(str(metal_twin.kubeconfig), None)

    with pytest.raises(CheckFailed) as failed:
        wait_ready(stack, reader, timeout_s=20, poll_s=1)
    message = str(failed.value)
    pod = f"prometheus-{prometheus.resource}-0"
    claim = f"db-{pod}"
    assert f"{pod}: PersistentVolumeClaim {claim} is Pending, no StorageClass" in message
    assert "gpufleet:cluster.monitoring.storage.storageClass" in message
    assert "alertmanager" not in message  # it has no claim: scheduled, running, Ready

    # What a provisioner does for the claim: a volume bound to it (the PV controller completes the binding).
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "ready-check-volume"},
        "spec": {
            "capacity": {"storage": "50Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "hostPath": {"path": "/nonexistent/ready-check"},
            "claimRef": {"namespace": ns, "name": claim},
        },
    }
    assert metal_twin.create(volume).ok
    wait_ready(stack, reader, timeout_s=120, poll_s=1)


def test_preflight_refuses_an_installed_prometheus_on_a_cluster_without_a_default_class(
    metal_twin: Kube,
) -> None:
    """The same cluster, read before the deploy: no StorageClass at all, so `prometheus: install` without
    `storage.storageClass` is refused with the key to set."""
    reader = KubernetesReader(str(metal_twin.kubeconfig), None)
    (finding,) = check_monitoring_storage(_spec(), reader)
    assert finding.is_error and "no default StorageClass (classes: none)" in finding.message
    assert "gpufleet:cluster.monitoring.storage.storageClass" in finding.fix
