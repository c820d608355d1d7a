"""The bridge from the cluster spec to the scheduler's inputs: the only place infra shapes scheduler views.

The scheduler never sees the spec; it gets plain frozen views, so the same pool is described once (in the spec)
and every object that targets it (flavors, device-plugin configs, expander priorities) is derived from it.
"""

from __future__ import annotations

import re

from infra import catalog
from infra.karpenter.facts import karpenter_managed
from infra.spec import ClusterSpec, NodePool
from scheduler.labels import GPU_TAINT, pool_node_labels
from scheduler.model import PoolView, PriorityClassView, SchedulingPolicy, TeamPolicy


def node_group_name(spec: ClusterSpec, pool_name: str) -> str:
    """The EKS managed node group name of a pool (its ASG is named eks-<this>-<uuid>)."""
    return f"{spec.cluster.name}-{pool_name}"


def asg_pattern(node_group: str) -> str:
    """Regex for the Auto Scaling group EKS creates for a managed node group: eks-<name>-<uuid>.

    Anchoring on the UUID keeps pools whose names are prefixes of each other (l40s, l40s-infer) apart.
    """
    return f"^eks-{re.escape(node_group)}-[0-9a-f]{{8}}(-[0-9a-f]{{4}}){{3}}-[0-9a-f]{{12}}$"


def _mig_instances(pool: NodePool) -> int | None:
    if not pool.sharing.mig or not pool.gpu_model:
        return None
    return dict(catalog.GPU_MODELS[pool.gpu_model].mig_profiles)[pool.sharing.mig]


def _node_size(spec: ClusterSpec, pool: NodePool) -> tuple[int | None, int | None]:
    if pool.instance_type:
        itype = catalog.CATALOG[pool.instance_type]
        return itype.vcpus, itype.memory_gib
    return pool.cpus_per_node, pool.memory_gi_b_per_node


GPU_MODEL_LABEL = "gpufleet.io/gpu-model"
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"


def node_labels(pool: NodePool, shared: dict[str, str]) -> dict[str, str]:
    """Every label a node of this pool carries: the user's, then gpufleet's (which win; rules.py refuses clashes)."""
    model = catalog.GPU_MODELS.get(pool.gpu_model or "")
    return {
        **pool.labels,
        GPU_MODEL_LABEL: pool.gpu_model or "",
        GPU_PRESENT_LABEL: "true",
        **({ACCELERATOR_LABEL: model.label} if model else {}),
        **shared,
    }


def pool_view(spec: ClusterSpec, pool: NodePool) -> PoolView:
    cpus, memory = _node_size(spec, pool)
    base = PoolView(
        name=pool.name,
        gpu_model=pool.gpu_model or "",
        gpus_per_node=pool.gpus_per_node or 0,
        max_nodes=pool.max_size or 0,
        labels={},
        taints=(),
        capacity_type=pool.capacity_type,
        sharing=pool.sharing.mode,
        time_slicing_replicas=pool.sharing.time_slicing.replicas if pool.sharing.time_slicing else None,
        mig_profile=pool.sharing.mig,
        mig_instances_per_gpu=_mig_instances(pool),
        cpus_per_node=cpus,
        memory_gib_per_node=memory,
        oversubscribe=pool.oversubscribe,
        # Karpenter pools have no node group: the priority expander leaves them to NodePool weights.
        node_group=asg_pattern(node_group_name(spec, pool.name))
        if spec.platform == "aws" and not karpenter_managed(spec, pool)
        else None,
    )
    labels = node_labels(pool, pool_node_labels(base))
    taints = (dict(GPU_TAINT), *({"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints))
    return PoolView(**{**base.__dict__, "labels": labels, "taints": taints})


def scheduler_inputs(spec: ClusterSpec) -> tuple[SchedulingPolicy, list[PoolView]]:
    """The scheduling policy and pool views that `scheduler.compile` takes, from a validated spec."""
    s = spec.scheduling
    teams = tuple(
        TeamPolicy(
            name=t.name,
            namespace=t.namespace or t.name,
            quotas=dict(t.quotas),
            borrowing_limit=t.borrowing_limit,
            lending_limit=t.lending_limit,
            priority=t.priority,
            groups=tuple(t.groups),
            weight=t.weight,
        )
        for t in spec.teams
    )
    policy = SchedulingPolicy(
        cohort=s.cohort,
        teams=teams,
        priority_classes=tuple(PriorityClassView(p.name, p.value, p.description) for p in s.priority_classes),
        placement_strategy=s.placement.strategy,
        placement_weights=dict(s.placement.weights),
        borrow_within_cohort_max_priority=s.borrow_within_cohort_max_priority,
        fair_sharing=s.fair_sharing,
        wait_for_pods_ready_timeout=s.wait_for_pods_ready_timeout,
        provisioning_requests=s.provisioning_requests,
        platform=spec.platform,
        kubernetes_version=spec.cluster.kubernetes_version,
        kube_scheduler_image_tag=spec.versions.kube_scheduler_image or "",
        kueue_version=spec.versions.kueue_chart,
    )
    return policy, [pool_view(spec, p) for p in spec.node_pools]
