"""Prometheus' volumes on destroy: the claims deleted, then a bounded wait until their volumes are gone.

Prometheus' claim is made by its StatefulSet, not by the stack, so Pulumi's state does not hold it. Its volume
belongs to the storage driver: with the class's `reclaimPolicy: Delete` (the `gp3` class on aws,
infra.aws.addons.ebs_csi) the driver deletes the EBS volume once the claim is gone, in the background. If
destroy went on to remove the driver (the add-on), the nodes and the cluster first, the volume would stay,
`available` and billed. So before that final phase `invoke destroy` deletes every claim left in the monitoring
namespace and waits until no PersistentVolume claimed from it remains; it fails (exit 1, before the cluster is
touched) naming the volumes that stay, so a rerun continues from there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from infra.errors import CheckFailed
from infra.spec import ClusterSpec

RELEASE_TIMEOUT_S = 300  # the EBS CSI driver detaches and deletes a volume in well under a minute


class VolumeClient(Protocol):
    def claims(self, namespace: str) -> Iterable[dict[str, Any]]: ...
    def delete_claim(self, namespace: str, name: str) -> None: ...
    def volumes(self) -> Iterable[dict[str, Any]]: ...


def claimed_from(volumes: Iterable[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The PersistentVolumes bound (or once bound) to a claim in `namespace`."""
    return [v for v in volumes if (v.get("spec", {}).get("claimRef") or {}).get("namespace") == namespace]


def _describe(volume: dict[str, Any]) -> str:
    spec, phase = volume.get("spec", {}), volume.get("status", {}).get("phase", "?")
    return f"{volume['metadata']['name']} ({phase}, reclaimPolicy {spec.get('persistentVolumeReclaimPolicy', '?')})"


def release_volumes(
    spec: ClusterSpec,
    cluster: VolumeClient,
    timeout_s: float = RELEASE_TIMEOUT_S,
    poll_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> int:
    """Delete the monitoring namespace's claims, wait for their volumes to go; the number of volumes waited
    for. Nothing on a stack that installs no Prometheus (the namespace is then not the stack's)."""
    mon = spec.cluster.monitoring
    if mon.prometheus != "install":
        return 0
    for claim in cluster.claims(mon.namespace):
        cluster.delete_claim(mon.namespace, claim["metadata"]["name"])
    waited = len(claimed_from(cluster.volumes(), mon.namespace))
    deadline = clock() + timeout_s
    while left := claimed_from(cluster.volumes(), mon.namespace):
        if clock() >= deadline:
            raise CheckFailed(
                f"destroy of stack {spec.stack!r}: {len(left)} volume(s) of {mon.namespace}'s claims still exist "
                f"{timeout_s:.0f} s after the claims were deleted: {', '.join(_describe(v) for v in left)}. "
                "The storage driver has not deleted them (a Retain policy keeps them for good). Delete them "
                f"(kubectl delete pv NAME, and the disk behind it), then `invoke destroy --stack {spec.stack} "
                "--yes` again: the cluster is still there"
            )
        pause(poll_s)
    return waited


class KubernetesVolumes:
    """VolumeClient over the official Kubernetes client."""

    def __init__(self, kubeconfig: str, context: str | None) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=kubeconfig, context=context)
        self._core, self._serialize = client.CoreV1Api(api), api.sanitize_for_serialization

    def claims(self, namespace: str) -> Iterable[dict[str, Any]]:
        listed = self._core.list_namespaced_persistent_volume_claim(namespace)
        return self._serialize(listed).get("items", [])

    def delete_claim(self, namespace: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.delete_namespaced_persistent_volume_claim(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def volumes(self) -> Iterable[dict[str, Any]]:
        return self._serialize(self._core.list_persistent_volume()).get("items", [])
