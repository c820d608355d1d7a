"""AWS tags the cluster relies on: ownership, load-balancer subnet discovery and cluster-autoscaler templates.

Tags are data other systems read, not decoration: the AWS load balancer controller finds subnets by the
`kubernetes.io/role/*` tags, and the cluster-autoscaler discovers node groups by the `k8s.io/cluster-autoscaler/*`
tags and, when a group has no node to copy, learns its labels, taints and GPUs from the node-template tags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from infra.spec import ClusterSpec

CA_PREFIX = "k8s.io/cluster-autoscaler"
CA_ENABLED = f"{CA_PREFIX}/enabled"
GPU_RESOURCE = "nvidia.com/gpu"


def cluster_tag(cluster: str) -> str:
    return f"kubernetes.io/cluster/{cluster}"


def ca_owner_tag(cluster: str) -> str:
    """The tag that scopes the autoscaler's IAM policy to this cluster's node groups."""
    return f"{CA_PREFIX}/{cluster}"


def common_tags(spec: ClusterSpec) -> dict[str, str]:
    """Tags on every AWS resource: who owns it (for cost reports and cleanup) plus the user's own tags."""
    return {
        "gpufleet.io/cluster": spec.cluster.name,
        "gpufleet.io/stack": spec.stack,
        **spec.cluster.tags,
    }


def subnet_tags(cluster: str, public: bool) -> dict[str, str]:
    """Public subnets take internet-facing load balancers, private ones internal load balancers and nodes."""
    role = "kubernetes.io/role/elb" if public else "kubernetes.io/role/internal-elb"
    return {role: "1", cluster_tag(cluster): "shared"}


TEMPLATE = f"{CA_PREFIX}/node-template"
# cluster-autoscaler cloudprovider/aws/README.md: per-ASG overrides of scale-down settings.
KEEP_NODES_OPTIONS = {
    # A node is only "unneeded" while its utilization is below the threshold, so 0 never removes it.
    f"{TEMPLATE}/autoscaling-options/scaledownutilizationthreshold": "0",
    f"{TEMPLATE}/autoscaling-options/scaledowngpuutilizationthreshold": "0",
}


def autoscaler_tags(
    cluster: str,
    labels: Mapping[str, str],
    taints: Iterable[Mapping[str, str]],
    resources: Mapping[str, int],
    options: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Discovery tags plus the node template the autoscaler uses to scale a group up from zero nodes.

    A group at zero has no node to copy, so without these the autoscaler cannot know that a new node would
    offer the pool's extended resources (`nvidia.com/gpu`, `nvidia.com/gpu.shared`, `nvidia.com/mig-*`,
    `vpc.amazonaws.com/efa`: device plugins advertise them only after boot) or carry the pool's labels and
    taints, and a pending pod that requests them would never trigger a scale-up. `resources` maps each
    extended resource to its count per node (zero counts are left out); `options` are per-group
    `autoscaling-options/*` overrides (cluster-autoscaler cloudprovider/aws/README.md).
    """
    tags = {CA_ENABLED: "true", ca_owner_tag(cluster): "owned"}
    for name, count in resources.items():
        if count:
            tags[f"{TEMPLATE}/resources/{name}"] = str(count)
    tags.update(options or {})
    for key, value in labels.items():
        tags[f"{CA_PREFIX}/node-template/label/{key}"] = value
    for taint in taints:
        tags[f"{CA_PREFIX}/node-template/taint/{taint['key']}"] = (
            f"{taint.get('value', '')}:{taint['effect']}"
        )
    return tags


def partition(region: str) -> str:
    """The ARN partition of a region (managed policy ARNs differ in China and GovCloud)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"
