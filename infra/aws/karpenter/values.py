"""Helm values of the Karpenter chart (oci://public.ecr.aws/karpenter/karpenter), keys as in its values.yaml.

- the controller runs on the system node group (a managed node group Karpenter does not own), never on a
  node it provisions; the chart's own affinity already keeps it off `karpenter.sh/nodepool` nodes;
- credentials through IRSA: the service account is annotated with the controller role;
- `settings.clusterName` / `interruptionQueue` tie it to this cluster and its SQS queue;
- the image is pinned by tag and digest from the versions recipe (the chart at the v1.14.1 tag still names
  the 1.13.0 image; its release script rewrites it when packaging);
- `reservedCapacity` (ODCRs and capacity blocks as the `reserved` capacity type) is on, as its default;
- with `prometheus: install`, the chart's ServiceMonitor (`serviceMonitor.enabled`, `additionalLabels` @v1.14.1)
  labelled for the stack's Prometheus, so Karpenter's own metrics (provisioning, disruption, interruption
  queue) are scraped; the release then waits for the kube-prometheus-stack release that serves the kind;
- `nodeRepair` is on (chart default off, ALPHA): EKS node auto-repair covers managed node groups only, so
  without it a Karpenter GPU node the node monitoring agent marks `AcceleratedHardwareReady=False` (XID
  errors) stays in the pool. Karpenter replaces such a node after 10 minutes, forcefully (no drain
  budget), and stops when more than 20% of a pool's nodes are unhealthy (website/content/en/docs/concepts/
  disruption.md "Node Auto Repair" @v1.14.1).
"""

from __future__ import annotations

from typing import Any

from infra.monitoring.stack import karpenter_service_monitor_values
from infra.spec import ClusterSpec

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "karpenter"
RELEASE = "karpenter"
CRD_RELEASE = "karpenter-crd"
ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
IMAGE_REPOSITORY = "public.ecr.aws/karpenter/controller"
SYSTEM_SELECTOR = {"gpufleet.io/role": "system"}


def karpenter_values(spec: ClusterSpec, role_arn: Any, queue_name: Any) -> dict[str, Any]:
    """`role_arn` and `queue_name` are plain strings, or Pulumi outputs in the program."""
    versions = spec.versions
    monitored = spec.cluster.monitoring.prometheus == "install"
    return {
        **({"serviceMonitor": karpenter_service_monitor_values(spec)} if monitored else {}),
        "serviceAccount": {
            "create": True,
            "name": SERVICE_ACCOUNT,
            "annotations": {ROLE_ANNOTATION: role_arn},
        },
        # Two replicas on different system nodes (the chart's required anti-affinity); one if there is one node.
        "replicas": min(2, max(spec.system_pool.min_size, 1)),
        "nodeSelector": {"kubernetes.io/os": "linux", **SYSTEM_SELECTOR},
        "controller": {
            "image": {
                "repository": IMAGE_REPOSITORY,
                "tag": versions.karpenter_chart,
                "digest": versions.karpenter_image_digest,
            },
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        },
        "settings": {
            "clusterName": spec.cluster.name,
            "interruptionQueue": queue_name,
            "featureGates": {"reservedCapacity": True, "nodeRepair": True},
        },
    }
