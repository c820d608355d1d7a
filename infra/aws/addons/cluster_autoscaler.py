"""Helm values of the cluster-autoscaler (chart `cluster-autoscaler`), tuned for GPU node groups.

- it finds the node groups by the discovery tags EKS puts on their Auto Scaling groups and uses IRSA (the
  role's policy is scoped to this cluster's groups by tag; see infra.aws.iam.autoscaler_policy);
- `priority,least-waste`: the scheduler component's priority ConfigMap orders pools (e.g. capacity blocks
  and on-demand before spot), ties go to the group that wastes the least;
- GPU nodes take 10-15 minutes to join (large image, driver init), so a provision time below that would
  mark healthy scale-ups as failed and back off the group;
- with `scheduling.provisioningRequests`, it serves Kueue's ProvisioningRequests (admission only when the
  nodes for a whole job can be provided);
- GPU nodes are expensive, so an empty one is removed after a short idle time, but not right after it was
  added (the first pod may still be pulling a large image); local scratch (emptyDir) must not pin a node.
"""

from __future__ import annotations

from typing import Any

from infra.monitoring.stack import autoscaler_service_monitor_values
from infra.spec import ClusterSpec

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
IMAGE_REPOSITORY = "registry.k8s.io/autoscaling/cluster-autoscaler"

ARGS: dict[str, Any] = {
    "balance-similar-node-groups": True,
    "expander": "priority,least-waste",
    "max-node-provision-time": "25m",
    "scale-down-unneeded-time": "10m",
    "scale-down-delay-after-add": "20m",
    "scale-down-utilization-threshold": "0.5",
    "skip-nodes-with-local-storage": False,
}


def cluster_autoscaler_values(spec: ClusterSpec, role_arn: Any) -> dict[str, Any]:
    """`role_arn` is the IRSA role's ARN (a plain string, or a Pulumi output in the program)."""
    return {
        "cloudProvider": "aws",
        "awsRegion": spec.region,
        "autoDiscovery": {"clusterName": spec.cluster.name},
        "image": {"repository": IMAGE_REPOSITORY, "tag": spec.versions.cluster_autoscaler_image},
        "rbac": {
            "serviceAccount": {
                "create": True,
                "name": SERVICE_ACCOUNT,
                "annotations": {ROLE_ANNOTATION: role_arn},
            }
        },
        # Kueue's ProvisioningRequest admission check needs the autoscaler to serve ProvisioningRequests.
        "extraArgs": {
            **ARGS,
            **({"enable-provisioning-requests": True} if spec.scheduling.provisioning_requests else {}),
        },
        # On the system pool: the autoscaler must never run on a node it might remove.
        "nodeSelector": {"gpufleet.io/role": "system"},
        # Scraped by the cluster's Prometheus (docs/operations.md) when monitoring is on.
        **(
            {"serviceMonitor": autoscaler_service_monitor_values(spec)}
            if spec.cluster.monitoring.enabled
            else {}
        ),
    }
