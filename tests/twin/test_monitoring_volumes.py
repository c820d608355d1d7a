"""Destroy's release of Prometheus' volumes against the twin's real API server and PersistentVolume controller:
the claims are deleted; a volume the storage driver does not delete (the twin has no driver: the controller
marks a `Delete` hostPath volume Failed) stops the destroy, naming it, before the cluster would go; once the
volume is gone (here the test deletes it, as the EBS CSI driver does) the release returns."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra.errors import CheckFailed
from infra.monitoring.volumes import KubernetesVolumes, release_volumes
from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.kube import Kube

NAMESPACE = "release-check"
VOLUME = "release-check-volume"
CLAIM = "prometheus-db-prometheus-0"


def _spec() -> ClusterSpec:
    spec = load_stack(ROOT / "Pulumi.metal.yaml")
    mon = spec.cluster.monitoring.model_copy(update={"prometheus": "install", "namespace": NAMESPACE})
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"monitoring": mon})})


@pytest.fixture
def bound_claim(metal_twin: Kube) -> Iterator[None]:
    assert metal_twin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}).ok
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": VOLUME,
                 "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": VOLUME},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": "/nonexistent/release-check"},
                 "claimRef": {"namespace": NAMESPACE, "name": CLAIM}},
    }  # fmt: skip
    assert metal_twin.create(claim).ok and metal_twin.create(volume).ok
    eventually(
        lambda: metal_twin.get("pvc", CLAIM, NAMESPACE).get("status", {}).get("phase") == "Bound",
        "the claim bound",
    )
    yield
    metal_twin.attempt("delete", "namespace", NAMESPACE, "--wait=false")
    metal_twin.attempt("delete", "pv", VOLUME, "--ignore-not-found", "--wait=false")


@pytest.mark.usefixtures("bound_claim")
def test_destroy_deletes_prometheus_claims_and_waits_for_their_volumes(metal_twin: Kube) -> None:
    cluster = KubernetesVolumes(str(metal_twin.kubeconfig), None)
    with pytest.raises(CheckFailed) as failed:
        release_volumes(_spec(), cluster, timeout_s=15, poll_s=1)
    assert f"{VOLUME} (" in str(failed.value) and "reclaimPolicy Delete" in str(failed.value)
    assert not metal_twin.items("pvc", NAMESPACE)  # the claim went (its volume is Released, then Failed)

    metal_twin.ok("delete", "pv", VOLUME)  # what the EBS CSI driver does for a Delete volume
    assert release_volumes(_spec(), cluster, timeout_s=60, poll_s=1) == 0
