"""The bridge from the cluster spec to the scheduler's inputs: the only place infra shapes scheduler views.

The scheduler never sees the spec; it gets plain frozen views, so the same pool is described once (in the spec)
and every object that targets it (flavors, device-plugin configs, expander priorities) is derived from it.
"""

from __future__ import annotations

import re

from infra import catalog
from infra.aws.node_room import node_room
from infra.pools import karpenter_managed
from infra.spec import ClusterSpec, NodePool
from infra.versions import extender_image, provisioning_request_crd
from scheduler.labels import (
    AWS_NETWORK_LAYERS,
    GPU_TAINT,
    HOSTNAME_LABEL,
    pool_node_labels,
)
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


def _efa_interfaces(pool: NodePool) -> int:
    """EFA interfaces per node of an EFA pool (what the EFA device plugin advertises), 0 otherwise."""
    if not pool.efa or not pool.instance_type:
        return 0
    return catalog.CATALOG[pool.instance_type].efa_interfaces


def topology_levels(spec: ClusterSpec, pool: NodePool) -> tuple[str, ...]:
    """The pool's Kueue Topology levels: the spec's labels, or on aws the EKS network layers for EFA pools;
    the host name is always the lowest level. Empty: the pool is not topology-aware."""
    if pool.topology_labels is not None:
        labels = tuple(pool.topology_labels)
    elif spec.platform == "aws" and pool.efa and not karpenter_managed(spec, pool):
        # Karpenter pools are not topology-aware by default: Kueue's TAS places only on nodes that exist and
        # Karpenter cannot back the ProvisioningRequest check that would let it wait for them (infra.rules).
        labels = AWS_NETWORK_LAYERS
    else:
        labels = ()
    if not labels:
        return ()
    return labels if labels[-1] == HOSTNAME_LABEL else (*labels, HOSTNAME_LABEL)


GPU_MODEL_LABEL = "gpufleet.io/gpu-model"
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"


def node_labels(pool: NodePool, shared: dict[str, str]) -> dict[str, str]:
    """Every label a node of this pool carries: the user's, then gpufleet's (which win; rules.py refuses clashes).

    The cluster-autoscaler's AWS GPU label (`k8s.amazonaws.com/accelerator`) goes only on pools whose GPUs are
    advertised as `nvidia.com/gpu`: the autoscaler counts a node with that label and no allocatable
    `nvidia.com/gpu` as unready (processors/customresources/gpu_processor.go), and renamed time-slicing
    (`nvidia.com/gpu.shared`) or mixed MIG leave it at 0 for good, so those nodes would stay "unready" and
    stop scale-ups cluster-wide once the unready limit is reached (kubernetes/autoscaler#8095, #7050).
    """
    model = catalog.GPU_MODELS.get(pool.gpu_model or "")
    whole_gpus = pool.sharing.mode == "exclusive"
    return {
        **pool.labels,
        GPU_MODEL_LABEL: pool.gpu_model or "",
        GPU_PRESENT_LABEL: "true",
        **({ACCELERATOR_LABEL: model.label} if model and whole_gpus else {}),
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
        dra_shares=pool.sharing.dra_shares.shares if pool.sharing.dra_shares else None,
        cpus_per_node=cpus,
        memory_gib_per_node=memory,
        pod_room=room.room if (room := node_room(spec, pool)) is not None else None,
        oversubscribe=pool.oversubscribe,
        # Karpenter pools have no node group: the priority expander leaves them to NodePool weights.
        node_group=asg_pattern(node_group_name(spec, pool.name))
        if spec.platform == "aws" and not karpenter_managed(spec, pool)
        else None,
        efa_per_node=_efa_interfaces(pool),
        topology_levels=topology_levels(spec, pool),
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
            external_services=t.allow_external_services,
            cpu_quota=t.cpu_quota,
            memory_quota_gib=t.memory_quota_gib,
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
        fair_preemption_strategies=tuple(s.fair_sharing_preemption_strategies),
        wait_for_pods_ready_timeout=s.wait_for_pods_ready_timeout,
        provisioning_requests=bool(s.provisioning_requests),
        provisioning_pools=tuple(s.provisioning_requests)
        if isinstance(s.provisioning_requests, list)
        else (),
        platform=spec.platform,
        kubernetes_version=spec.cluster.kubernetes_version,
        kube_scheduler_image_tag=spec.versions.kube_scheduler_image or "",
        extender_image=extender_image(spec.versions) if s.placement.strategy == "FragmentationAware" else "",
        extender_shadow=s.placement.shadow,
        kueue_version=spec.versions.kueue_chart,
        metrics=spec.cluster.monitoring.enabled,
        provisioning_request_crd=(
            provisioning_request_crd(spec.versions.cluster_autoscaler_image or "")
            # only where gpufleet installs Kueue: Kueue sets its provisioning controller up only if the CRD is
            # served when it starts, so a Kueue that runs already must have found it (preflight checks)
            if s.provisioning_requests and spec.platform == "aws" and spec.cluster.addons.kueue == "install"
            else ""
        ),
        platform_namespaces=platform_namespaces(spec),
        kuberay_namespace=s.kuberay_namespace,
        pod_priority_classes=tuple(s.pod_priority_classes),
        max_termination_grace_period=s.max_termination_grace_period,
        cpu_node_labels=dict(s.cpu_node_labels),
        dra_shares=any(p.sharing.dra_shares for p in spec.node_pools),
    )
    return policy, [pool_view(spec, p) for p in spec.node_pools]


def platform_namespaces(spec: ClusterSpec) -> tuple[str, ...]:
    """Namespaces whose pods may connect to team pods: Prometheus's (it scrapes them) while monitoring is on,
    then `scheduling.platformNamespaces`. Not Kueue's: it never connects to pods."""
    monitoring = [spec.cluster.monitoring.namespace] if spec.cluster.monitoring.enabled else []
    return tuple(dict.fromkeys([*monitoring, *spec.scheduling.platform_namespaces]))


def cpu_capacity_warnings(spec: ClusterSpec) -> list[str]:
    """On EKS without `scheduling.cpuNodeLabels`, CPU-only work runs on the system pool (its only untainted
    nodes): say when the teams' CPU-only allowances add up to more cores than that pool can ever have, since
    Kueue admits by quota alone and such jobs would wait for a node."""
    if spec.platform != "aws" or spec.scheduling.cpu_node_labels or not spec.teams:
        return []
    instance = catalog.lookup(spec.system_pool.instance_type)
    if instance is None:
        return []
    cores = spec.system_pool.max_size * instance.vcpus
    allowed = sum(t.cpu_quota for t in spec.teams)
    if allowed <= cores:
        return []
    return [
        f"the teams' CPU-only allowances (teams[].cpuQuota, {allowed} cores in all) exceed the system pool's "
        f"{cores} cores at maxSize ({spec.system_pool.max_size} x {spec.system_pool.instance_type}), where CPU-only "
        "work runs: lower the allowances, grow the system pool, or add CPU nodes and name their labels in "
        "scheduling.cpuNodeLabels"
    ]
