"""What an already-equipped cluster runs that the twin cannot run for real: the NVIDIA GPU operator.

The GPU operator drives drivers and device plugins on GPU hosts; the twin has none. Its operands' effect on
the API is played by `twin.gpu_operands` (the GPU resources and feature-discovery labels its device plugin and
GFD set from the deployed config, mig-manager's pause) and, on aws, their pods by `twin.daemonsets`. What
remains is the release itself, which is what
gpufleet looks at when it adopts an operator that runs (`cluster.addons.gpuOperator: existing`): the
operator's Deployment in its namespace, with the labels and image the chart gives it (NVIDIA/gpu-operator
v26.7.0 deployments/gpu-operator/templates/operator.yaml and `gpu-operator.labels` in _helpers.tpl; the
release's chart and app version is the version tag). Its pod runs on a kwok node and does nothing.
"""

from __future__ import annotations

from typing import Any

from infra.spec import ClusterSpec
from scheduler.labels import GPU_OPERATOR_NAMESPACE

OPERATOR_IMAGE = "nvcr.io/nvidia/gpu-operator"


def operator_labels(version: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "gpu-operator",
        "helm.sh/chart": f"gpu-operator-{version}",
        "app.kubernetes.io/instance": "gpu-operator",
        "app.kubernetes.io/version": version,
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/component": "gpu-operator",
    }


def gpu_operator_standin(spec: ClusterSpec) -> list[dict[str, Any]]:
    version = spec.versions.gpu_operator_chart
    labels = operator_labels(version)
    selector = {"app.kubernetes.io/component": "gpu-operator", "app": "gpu-operator"}
    meta = {"namespace": GPU_OPERATOR_NAMESPACE, "labels": labels}
    pod = {
        "serviceAccountName": "gpu-operator",
        "priorityClassName": "system-node-critical",
        "containers": [
            {
                "name": "gpu-operator",
                "image": f"{OPERATOR_IMAGE}:{version}",
                "command": ["gpu-operator"],
                "resources": {"requests": {"cpu": "200m", "memory": "100Mi"}},
            }
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GPU_OPERATOR_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gpu-operator", **meta}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "gpu-operator", **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": {**labels, **selector}}, "spec": pod},
            },
        },
    ]
