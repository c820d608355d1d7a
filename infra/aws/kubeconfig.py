"""The kubeconfig of an EKS cluster, as a document: token from `aws eks get-token`, no static credentials."""

from __future__ import annotations

import json
from typing import Any


def kubeconfig(cluster: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig (JSON, which is YAML) that authenticates with the caller's AWS identity."""
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region, "--output", "json"],
            "interactiveMode": "Never",
        }
    }
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}
        ],
        "users": [{"name": cluster, "user": user}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
        "current-context": cluster,
    }
    return json.dumps(doc, indent=2)
