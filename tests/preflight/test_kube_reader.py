"""The one Kubernetes reader of preflight, against a small HTTP server that answers like an API server: plain
dicts back, a missing object as None, any other API error raised (the checks turn it into a finding)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from infra.preflight.kube import KubernetesReader

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {"a": "b"}}}


def _items(kind: str, *objs: dict[str, Any]) -> dict[str, Any]:
    return {"kind": f"{kind}List", "metadata": {}, "items": list(objs)}


ANSWERS: dict[str, tuple[int, dict[str, Any]]] = {
    "/api/v1/nodes/gpu-1": (200, NODE),
    "/api/v1/nodes": (200, _items("Node", NODE)),
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/issuers.cert-manager.io": (
        403,
        {"kind": "Status", "code": 403, "reason": "Forbidden"},
    ),
    "/apis/storage.k8s.io/v1/storageclasses": (
        200,
        _items("StorageClass", {"metadata": {"name": "fast"}, "provisioner": "x"}),
    ),
    "/apis/apps/v1/daemonsets": (200, _items("DaemonSet", {"metadata": {"name": "cilium"}})),
    "/apis/apps/v1/deployments": (200, _items("Deployment", {"metadata": {"name": "kueue"}})),
}


class _Api(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        code, body = ANSWERS.get(path, (404, {"kind": "Status", "code": 404, "reason": "NotFound"}))
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[KubernetesReader]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{server.server_port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: ctx, context: {cluster: c, user: u}}]\ncurrent-context: ctx\n"
    )
    try:
        yield KubernetesReader(str(kubeconfig), "ctx")
    finally:
        server.shutdown()


def test_reads_objects_and_lists_as_plain_dicts(reader: KubernetesReader) -> None:
    assert reader.node("gpu-1") == NODE
    assert [n["metadata"]["name"] for n in reader.nodes()] == ["gpu-1"]
    assert [s["metadata"]["name"] for s in reader.storage_classes()] == ["fast"]
    assert [d["metadata"]["name"] for d in reader.daemonsets()] == ["cilium"]
    assert [d["metadata"]["name"] for d in reader.deployments("app=kueue")] == ["kueue"]


def test_a_missing_object_is_none_and_other_errors_are_raised(reader: KubernetesReader) -> None:
    assert reader.node("gpu-9") is None
    assert reader.crd("certificates.cert-manager.io") is None
    with pytest.raises(ApiException) as raised:
        reader.crd("issuers.cert-manager.io")
    assert raised.value.status == 403
