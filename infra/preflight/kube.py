"""The one Kubernetes reader preflight's in-cluster checks use: the official client, from the stack's kubeconfig
and context, answering with plain dicts (a missing object is None, any other API error is raised).

It serves both check families' protocols (`infra.preflight.scheduling.ClusterReader`,
`infra.preflight.nvsentinel.DatastoreReader`) and the deploy's wait for the metrics stack
(`infra.monitoring.readiness.PodReader`); tests give the checks small fakes instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class KubernetesReader:
    """ClusterReader and DatastoreReader over the official Kubernetes client."""

    def __init__(self, kubeconfig: str, context: str | None) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=kubeconfig, context=context)
        self._core, self._apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self._ext, self._storage = client.ApiextensionsV1Api(api), client.StorageV1Api(api)
        self._serialize = api.sanitize_for_serialization

    def _one(self, read: Callable[[str], Any], name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return dict(self._serialize(read(name)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def node(self, name: str) -> dict[str, Any] | None:
        return self._one(self._core.read_node, name)

    def crd(self, name: str) -> dict[str, Any] | None:
        return self._one(self._ext.read_custom_resource_definition, name)

    def nodes(self) -> Iterable[dict[str, Any]]:
        return self._serialize(self._core.list_node()).get("items", [])

    def daemonsets(self) -> Iterable[dict[str, Any]]:
        return self._serialize(self._apps.list_daemon_set_for_all_namespaces()).get("items", [])

    def deployments(self, label_selector: str) -> Iterable[dict[str, Any]]:
        listed = self._apps.list_deployment_for_all_namespaces(label_selector=label_selector)
        return self._serialize(listed).get("items", [])

    def storage_classes(self) -> Iterable[dict[str, Any]]:
        return self._serialize(self._storage.list_storage_class()).get("items", [])

    def pods(self, namespace: str, label_selector: str) -> Iterable[dict[str, Any]]:
        listed = self._core.list_namespaced_pod(namespace, label_selector=label_selector)
        return self._serialize(listed).get("items", [])

    def claims(self, namespace: str) -> Iterable[dict[str, Any]]:
        return self._serialize(self._core.list_namespaced_persistent_volume_claim(namespace)).get("items", [])
