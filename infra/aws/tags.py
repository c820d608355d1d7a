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


def ownership_tags(spec: ClusterSpec) -> dict[str, str]:
    """Who owns a resource (for cost reports and cleanup): the cluster and the stack."""
    return {"gpufleet.io/cluster": spec.cluster.name, "gpufleet.io/stack": spec.stack}


def common_tags(spec: ClusterSpec) -> dict[str, str]:
    """Tags on every AWS resource: who owns it plus the user's own tags."""
    return {**ownership_tags(spec), **spec.cluster.tags}


def subnet_tags(cluster: str, public: bool) -> dict[str, str]:
    """Public subnets take internet-facing load balancers, private ones internal load balancers and nodes."""
    role = "kubernetes.io/role/elb" if public else "kubernetes.io/role/internal-elb"
    return {role: "1", cluster_tag(cluster): "shared"}


TEMPLATE = f"{CA_PREFIX}/node-template"
# cluster-autoscaler cloudprovider/aws/README.md: per-ASG overrides of the scale-down flags.
OPTIONS = f"{TEMPLATE}/autoscaling-options"
# A node is "underutilized" when its utilization is at or below the threshold (eligibility.go since
# kubernetes/autoscaler#8975, in every pinned release), so a threshold of 0 no longer keeps an empty node; what
# keeps one is an unneeded time longer than it can live: a year, more than the longest capacity block (182 days).
KEEP_NODES_OPTIONS = {f"{OPTIONS}/scaledownunneededtime": "8760h"}
# With that same rule a GPU threshold of 0 makes every GPU node with a GPU requested ineligible, so scale-down
# never evicts a running GPU pod to consolidate; empty GPU nodes are still removed after the unneeded time.
BUSY_GPU_NODES_OPTIONS = {f"{OPTIONS}/scaledowngpuutilizationthreshold": "0"}


def scale_down_options(capacity_block: bool, gpu_node: bool) -> dict[str, str]:
    """Per-group scale-down overrides: capacity-block nodes are paid for whether busy or not, so never removed;
    nodes the autoscaler sees as GPU nodes (its GPU label) are removed only when no GPU is requested on them."""
    return {
        **(KEEP_NODES_OPTIONS if capacity_block else {}),
        **(BUSY_GPU_NODES_OPTIONS if gpu_node else {}),
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
