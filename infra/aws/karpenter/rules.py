"""Spec rules of `cluster.autoscaler: karpenter`, run by the composer (`infra.rules`) on a catalog-resolved spec.

Each names its key path and the reason, so nothing is created for a pool Karpenter could never serve.
"""

from __future__ import annotations

from infra import catalog
from infra.aws.karpenter.disruption import MIN_KUBERNETES, training_pools
from infra.pools import (
    MAX_QUEUE_NAME,
    MAX_ROLE_NAME,
    capacity_types,
    karpenter_managed,
    node_role_name,
    uses_karpenter,
)
from infra.problems import NP
from infra.spec import ClusterSpec, DisruptionBudget, NodePool

SHARED_REASON = (
    "Karpenter sizes nodes from instance-type facts and no instance type offers nvidia.com/gpu.shared or "
    "MIG resources (kubernetes-sigs/karpenter#729; the ALPHA NodeOverlay is not used), so this pool stays an "
    "EKS managed node group scaled by the cluster-autoscaler; remove the karpenter key"
)


def karpenter_odcr(spec: ClusterSpec, pool: NodePool) -> bool:
    """An On-Demand pool with a reservation id under Karpenter: an ODCR it launches into first."""
    return spec.cluster.autoscaler == "karpenter" and pool.capacity_type == "ON_DEMAND"


def _minor(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def _capacity(at: str, pool: NodePool, problems: list[str]) -> None:
    types = capacity_types(pool)
    if "reserved" in types and not pool.capacity_reservation_id:
        problems.append(
            f"{at}.karpenter.capacityTypes: 'reserved' needs capacityReservationId (a capacity block or an "
            "On-Demand Capacity Reservation)"
        )
    if pool.capacity_reservation_id and "reserved" not in types:
        problems.append(
            f"{at}.karpenter.capacityTypes: the pool has a capacity reservation; include 'reserved' or remove "
            "capacityReservationId"
        )
    if pool.capacity_type == "CAPACITY_BLOCK" and set(types) != {"reserved"}:
        problems.append(
            f"{at}.karpenter.capacityTypes: a CAPACITY_BLOCK pool launches only into its block; accepted: [reserved]"
        )


def _disruption(at: str, pool: NodePool, problems: list[str]) -> None:
    settings = pool.karpenter
    if settings is None:
        return
    if settings.workload == "training" and settings.consolidation_policy == "WhenEmptyOrUnderutilized":
        problems.append(
            f"{at}.karpenter.consolidationPolicy: training pools are consolidated only when empty (moving a "
            "running job loses its progress); accepted: WhenEmpty, or set karpenter.workload: inference"
        )


def _allows_drift(budget: DisruptionBudget) -> bool:
    """A budget that lets at least one node drift (no reasons: every reason, Drifted included)."""
    covers = not budget.reasons or "Drifted" in budget.reasons
    return covers and int(budget.nodes.rstrip("%")) > 0


def _drift(at: str, pool: NodePool, problems: list[str]) -> None:
    """A `Drifted` budget above 0 on a training pool kills running jobs unless drift waits for them.

    Karpenter v1.14.1 drains a drifted node despite `karpenter.sh/do-not-disrupt` once the NodePool has a
    `terminationGracePeriod` and deletes the remaining pods when it ends (karpenter-provider-aws
    website/content/en/docs/concepts/disruption.md:277-278, 386-387; kubernetes-sigs/karpenter
    pkg/controllers/disruption/types.go:189-196, drift is an eventual disruption). Without a grace period
    (`Never`) drift is blocked by the do-not-disrupt pods, so the node rolls once its jobs end.
    """
    settings = pool.karpenter
    if settings is None or settings.workload != "training" or settings.budgets is None:
        return
    if settings.termination_grace_period == "Never" or settings.drain_busy_nodes_on_drift:
        return
    for j, budget in enumerate(settings.budgets):
        if _allows_drift(budget):
            problems.append(
                f"{at}.karpenter.budgets[{j}]: a Drifted budget of {budget.nodes} nodes on a training pool "
                "deletes running training pods when the grace period ends (an AMI bump, any NodePool change); "
                "accepted: nodes 0 for Drifted, terminationGracePeriod: Never (drift waits for running jobs), "
                "or karpenter.drainBusyNodesOnDrift: true"
            )


def _pool(i: int, pool: NodePool, spec: ClusterSpec, problems: list[str]) -> None:
    at = f"{NP}[{i}]"
    if not karpenter_managed(spec, pool):
        if pool.karpenter is not None:
            problems.append(f"{at}.karpenter: sharing {pool.sharing.mode}: {SHARED_REASON}")
        return
    if pool.instance_type not in catalog.CATALOG:
        return  # reported by the pool rules
    # instanceTypes and availabilityZones are checked for every aws pool (infra.aws.rules).
    _capacity(at, pool, problems)
    _disruption(at, pool, problems)
    _drift(at, pool, problems)
    for key, value in (("minSize", pool.min_size), ("desiredSize", pool.desired_size)):
        if value:
            problems.append(
                f"{at}.{key}: gpufleet's NodePools launch nodes only for pending pods and keep no minimum "
                f"(Karpenter's static capacity is ALPHA and not used); remove {key} (or use 0)"
            )
    if pool.oversubscribe:
        problems.append(
            f"{at}.oversubscribe: Kueue quotas may not exceed the NodePool's limits under Karpenter (it never "
            "launches past them); lower the quotas or raise maxSize"
        )


def karpenter_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """Append every problem of the Karpenter settings of a spec."""
    if spec.platform != "aws":
        if spec.cluster.autoscaler == "karpenter":
            problems.append("gpufleet:cluster.autoscaler: karpenter is only for platform aws")
        for i, pool in enumerate(spec.node_pools):
            if pool.karpenter is not None:
                problems.append(f"{NP}[{i}].karpenter: only for platform aws")
        return
    if not uses_karpenter(spec):
        for i, pool in enumerate(spec.node_pools):
            if pool.karpenter is not None:
                problems.append(f"{NP}[{i}].karpenter: only with gpufleet:cluster.autoscaler: karpenter")
        return
    for i, pool in enumerate(spec.node_pools):
        _pool(i, pool, spec, problems)
    if spec.scheduling.provisioning_requests:
        problems.append(
            "gpufleet:scheduling.provisioningRequests: served by the cluster-autoscaler only and Karpenter does "
            "not implement ProvisioningRequest; set it to false (gangs still start all-or-nothing through "
            "waitForPodsReadyTimeout)"
        )
    if len(node_role_name(spec)) > MAX_ROLE_NAME:
        problems.append(
            f"gpufleet:cluster.name: the Karpenter node role {node_role_name(spec)!r} exceeds IAM's "
            f"{MAX_ROLE_NAME} characters; shorten the cluster name"
        )
    if len(spec.cluster.name) > MAX_QUEUE_NAME:
        problems.append(
            f"gpufleet:cluster.name: the Karpenter interruption queue is named after the cluster and SQS allows "
            f"{MAX_QUEUE_NAME} characters; shorten the cluster name"
        )
    training = training_pools(spec)
    if training and _minor(spec.cluster.kubernetes_version) < _minor(MIN_KUBERNETES):
        problems.append(
            f"gpufleet:cluster.kubernetesVersion: Karpenter training pools ({', '.join(training)}) need "
            f"{MIN_KUBERNETES} or later: running training pods are marked karpenter.sh/do-not-disrupt by a "
            "MutatingAdmissionPolicy, GA and served by default from 1.36 (KEP-3962); or set "
            "karpenter.workload: inference on these pools"
        )
