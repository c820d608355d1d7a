"""The kubeconfig of an EKS cluster, as a document: token from `aws eks get-token`, no static credentials."""

from __future__ import annotations

import json
from typing import Any


def kubeconfig(
    cluster: str,
    endpoint: str,
    ca_data: str,
    region: str,
    *,
    profile: str | None = None,
    role_arn: str | None = None,
) -> str:
    """A kubeconfig (JSON, which is YAML) that authenticates with the caller's AWS identity.

    `profile` and `role_arn` are the AWS provider's own (`aws:profile`, `aws:assumeRoles`): the token must be
    minted for the identity that created the cluster, which is its only admin until access entries exist.
    The exec plugin runs the `aws` CLI, so it must be installed where the kubeconfig is used (preflight checks).
    """
    args = ["eks", "get-token", "--cluster-name", cluster, "--region", region, "--output", "json"]
    if role_arn:
        args += ["--role-arn", role_arn]
    user: dict[str, Any] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": args,
            "interactiveMode": "Never",
        }
    }
    if profile:
        user["exec"]["env"] = [{"name": "AWS_PROFILE", "value": profile}]
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
