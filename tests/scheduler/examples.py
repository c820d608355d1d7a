"""Hand-built scheduler inputs: the prod example's shape (aws), the metal example's (existing), and a small one.

They mirror Pulumi.example-prod.yaml / Pulumi.metal.yaml with the instance facts infra's catalog supplies, so
the scheduler's tests do not depend on the infra adapter.
"""

from __future__ import annotations

from dataclasses import replace

from infra.versions import KUEUE_VERSION
from scheduler.labels import AWS_NETWORK_LAYERS, GPU_TAINT, HOSTNAME_LABEL, POOL_LABEL
from scheduler.model import PoolView, SchedulingPolicy, TeamPolicy


def pool(name: str, gpu_model: str, gpus: int, max_nodes: int, **kw: object) -> PoolView:
    labels = {POOL_LABEL: name, **kw.pop("extra_labels", {})}  # type: ignore[dict-item]
    return PoolView(name=name, gpu_model=gpu_model, gpus_per_node=gpus, max_nodes=max_nodes, labels=labels,
                    taints=(dict(GPU_TAINT),), **kw)  # type: ignore[arg-type]  # fmt: skip


PROD_POOLS = (
    pool("h100-train", "H100", 8, 4, capacity_type="CAPACITY_BLOCK", cpus_per_node=192, memory_gib_per_node=2048,
         node_group="eks-h100-train-.*", extra_labels={"workload": "training"}, efa_per_node=32,
         topology_levels=(*AWS_NETWORK_LAYERS, HOSTNAME_LABEL)),
    pool("l40s-infer", "L40S", 4, 6, cpus_per_node=48, memory_gib_per_node=384, node_group="eks-l40s-infer-.*",
         extra_labels={"workload": "inference"}),
    pool("a10g-batch", "A10G", 1, 16, capacity_type="SPOT", sharing="timeSlicing", time_slicing_replicas=4,
         cpus_per_node=8, memory_gib_per_node=32, node_group="eks-a10g-batch-.*"),
    pool("h100-mig", "H100", 8, 1, sharing="mig", mig_profile="1g.10gb", mig_instances_per_gpu=7, cpus_per_node=192,
         memory_gib_per_node=2048, node_group="eks-h100-mig-.*"),
)  # fmt: skip

PROD = SchedulingPolicy(
    cohort="gpufleet",
    teams=(
        TeamPolicy("llm-training", "team-llm", {"h100-train": 24}, borrowing_limit=8, lending_limit=8,
                   priority="production", groups=("llm-engineers",), weight=2.0),
        TeamPolicy("research", "team-research", {"h100-train": 8, "l40s-infer": 8, "h100-mig": 4}, borrowing_limit=8,
                   groups=("researchers",)),
        TeamPolicy("inference", "team-inference", {"l40s-infer": 16}, priority="production",
                   groups=("serving-oncall",)),
        TeamPolicy("batch", "team-batch", {"a10g-batch": 16, "h100-mig": 4}, priority="preemptible",
                   groups=("data-eng",)),
    ),
    platform="aws",
    kueue_version=KUEUE_VERSION,
)  # fmt: skip

METAL_POOLS = (
    pool("h100", "H100", 8, 4, cpus_per_node=192, memory_gib_per_node=2048),
    pool("l40s", "L40S", 4, 3, sharing="timeSlicing", time_slicing_replicas=2, cpus_per_node=64,
         memory_gib_per_node=512),
)  # fmt: skip

METAL = SchedulingPolicy(
    teams=(
        TeamPolicy("vision", "vision", {"h100": 16, "l40s": 4}, borrowing_limit=8, groups=("vision-team",)),
        TeamPolicy("nlp", "nlp", {"h100": 16, "l40s": 8}, borrowing_limit=8, groups=("nlp-team",)),
    ),
    platform="existing",
    kueue_version=KUEUE_VERSION,
)  # fmt: skip

SMALL_POOLS = (pool("l40s", "L40S", 1, 2, cpus_per_node=4, memory_gib_per_node=32, node_group="eks-l40s-.*"),)
SMALL = SchedulingPolicy(
    teams=(TeamPolicy("research", "research", {"l40s": 2}, groups=("gpufleet:research",)),),
    kueue_version=KUEUE_VERSION,
)

# The metal shape on Kubernetes 1.36 with the L40S pool cut into DRA shares (8 per GPU).
SHARES_POOLS = (
    METAL_POOLS[0],
    pool("l40s", "L40S", 4, 3, sharing="draShares", dra_shares=8, cpus_per_node=64, memory_gib_per_node=512),
)
SHARES = replace(METAL, kubernetes_version="1.36", kube_scheduler_image_tag="v1.36.4", dra_shares=True)

EXAMPLES = {
    "prod": (PROD, PROD_POOLS),
    "metal": (METAL, METAL_POOLS),
    "small": (SMALL, SMALL_POOLS),
    "shares": (SHARES, SHARES_POOLS),
}


def with_provisioning(policy: SchedulingPolicy) -> SchedulingPolicy:
    return replace(policy, provisioning_requests=True, fair_sharing=False)
