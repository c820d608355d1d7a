"""The EKS managed kube-scheduler's NodeResourcesFit scoring, in the shape `aws.eks.Cluster` takes.

EKS accepts only some resource names in `kubeSchedulerConfig.nodeResourcesFit.scoringStrategy.resources`
(EKS User Guide, "Advanced Kubernetes control plane configuration"; EKS API reference `ResourceConstraints`
and `ResourceWeight`: weights 1..100) and refuses CreateCluster/UpdateClusterConfig otherwise. So only those
names are sent: the renamed time-sliced and MIG resources of shared pools are left out (`infra.rules` refuses
them in `scheduling.placement.weights` on aws). Every accepted name the spec weighs is sent with an explicit
weight, and the strategy type always: EKS keeps the previous value of a field an update omits, so a weight
removed from the spec would otherwise stay in force.
"""

from __future__ import annotations

from typing import Any

# EKS User Guide, control-plane-configuration: the resources the managed scheduler may weigh.
EKS_SCHEDULER_RESOURCES = (
    "cpu",
    "memory",
    "nvidia.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
)
EKS_WEIGHT_RANGE = (1, 100)
# What the spec's default weights mean when a key is left out (infra.spec.Placement's defaults).
DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1, "nvidia.com/gpu": 10}


def eks_scoring_resources(weights: dict[str, int]) -> list[dict[str, Any]]:
    """Explicit weights for cpu, memory and nvidia.com/gpu (always), plus any other accepted name weighed."""
    merged = {**DEFAULT_WEIGHTS, **{k: v for k, v in weights.items() if k in EKS_SCHEDULER_RESOURCES}}
    return [{"name": name, "weight": merged[name]} for name in EKS_SCHEDULER_RESOURCES if name in merged]


def eks_scheduler_config(strategy: str, weights: dict[str, int]) -> dict[str, Any]:
    """`kube_scheduler_config` for `aws.eks.Cluster`: the strategy type and every accepted weight, explicit."""
    return {
        "node_resources_fit": {
            "scoring_strategy": {"type": strategy, "resources": eks_scoring_resources(weights)}
        }
    }
