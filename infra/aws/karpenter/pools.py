"""One NodePool + EC2NodeClass per Karpenter-provisioned GPU pool, built from the spec alone.

Which pools Karpenter provisions: with `cluster.autoscaler: karpenter`, every pool that uses whole GPUs.
Time-sliced and MIG pools stay EKS managed node groups scaled by the cluster-autoscaler in the same cluster:
Karpenter decides from instance-type facts, and no instance type offers `nvidia.com/gpu.shared` or
`nvidia.com/mig-*` (the device plugin creates them after boot), so a pod asking for them would never get a
node (kubernetes-sigs/karpenter#729). Keeping them on node groups means no pool silently never scales.

What a NodePool carries, and why:
- requirements: the pool's instance types (all with the same GPU model and count, so a Kueue flavor's
  quota holds on every node), their architecture, the capacity types and the pool's zones;
- the pool's labels and taints, from `infra.scheduling.pool_view` -- the same values the Kueue flavors
  select and tolerate (never a second copy);
- `limits` from the pool's maximum: GPUs, and CPU/memory of the largest allowed type, so the GPU limit is
  the one that binds and Kueue quotas (<= max GPUs, a spec rule) never exceed it;
- `weight`: reserved > on-demand > spot, the order the cluster-autoscaler's priority expander used;
- disruption: training pools are consolidated only when empty, inference pools also when underutilised;
  reserved capacity is never consolidated (it is paid for whether used or not); drift (an AMI bump) is
  rolled one node at a time on inference pools and not at all on busy training nodes (below); nodes never
  expire by default (expiry is forceful and would kill a run);
- `terminationGracePeriod`, so that a forced termination ends in bounded time. Training pods carry
  `karpenter.sh/do-not-disrupt` (infra.aws.karpenter.disruption), and Karpenter's termination controller does not
  evict such pods: without a grace period a Spot interruption or a capacity block's end kills them with the
  instance, with no SIGTERM to checkpoint on, and a node deletion (`invoke destroy`) waits until the job ends
  (Karpenter v1.14.1 docs, concepts/disruption.md "Pod-Level Controls" and "TerminationGracePeriod"). With
  one, Karpenter deletes each such pod at `terminationGracePeriod - terminationGracePeriodSeconds` after the
  drain starts, so it gets its own grace period before the node goes. The default fits the pool's shortest
  notice: Spot 2 minutes ("Interruption"), a capacity block 10 minutes (Karpenter starts draining 10 minutes
  before EC2 terminates, tasks/odcrs.md), each less a margin for the event to reach Karpenter; On-Demand and
  ODCR nodes have no notice, and 15 minutes bounds a deletion well inside the destroy's 45-minute timeout;
- a grace period also makes drifted nodes drain despite do-not-disrupt (concepts/disruption.md "Drift"), so
  training pools get a `Drifted` budget of 0 nodes by default: a busy training node is never replaced for an
  AMI bump; it goes when empty (`WhenEmpty`, the `Empty` budget) and its replacement runs the new AMI.

The EC2NodeClass pins the AMI by alias version from the versions recipe (never `@latest`), requires IMDSv2
with a hop limit of 1, encrypts gp3 volumes on the device the AMI family keeps its data on, attaches EFA on
every network card for EFA pools, selects the reservation of reserved pools, and carries the node bootstrap
script shared with the managed node groups (`infra.aws.userdata`; Karpenter appends its own NodeConfig part
to the MIME document, Karpenter docs "spec.userData", AL2023).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra import catalog
from infra.aws import launch_template as lt
from infra.aws.nodepools import gpu_labels
from infra.aws.tags import common_tags
from infra.aws.userdata import gpu_node_script, mime_user_data
from infra.pools import (
    allowed_instance_types,
    capacity_types,
    karpenter_pools,
    node_role_name,
    only_reserved,
    placement_group_name,
    reserved,
    workload,
    zones,
)
from infra.scheduling import pool_view
from infra.spec import ClusterSpec, DisruptionBudget, NodePool
from scheduler.autoscaling import PRIORITY
from scheduler.labels import metadata

NODEPOOL_API = "karpenter.sh/v1"
NODECLASS_API = "karpenter.k8s.aws/v1"
NODECLASS_GROUP = "karpenter.k8s.aws"
DISCOVERY_TAG = "karpenter.sh/discovery"  # on subnets and security groups the node classes select
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH = "kubernetes.io/arch"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ARCHES = {"x86_64": "amd64", "arm64": "arm64"}
# Bottlerocket keeps the OS on a small read-only /dev/xvda; its data volume (images, pods) is /dev/xvdb.
BOTTLEROCKET_OS_VOLUME_GIB = 4
TRAINING_CONSOLIDATE_AFTER = "10m"  # as the cluster-autoscaler's scale-down-unneeded-time
INFERENCE_CONSOLIDATE_AFTER = "30m"  # serving load comes back; do not churn GPU nodes on a dip
# Default terminationGracePeriod per kind of capacity (see the module docstring): the notice less a margin.
TERMINATION_GRACE = {"spot": "90s", "capacity-block": "9m", "on-demand": "15m"}


@dataclass(frozen=True)
class KarpenterPoolPlan:
    """What one pool becomes under Karpenter (also what `invoke plan` shows)."""

    pool: str
    instance_types: tuple[str, ...]
    capacity_types: tuple[str, ...]
    zones: tuple[str, ...]
    workload: str
    consolidation_policy: str
    consolidate_after: str
    expire_after: str
    termination_grace_period: str | None  # None: Karpenter waits for do-not-disrupt pods for ever
    limits: dict[str, str]
    reservation_id: str | None


def ami_alias(spec: ClusterSpec, pool: NodePool) -> str:
    """The EC2NodeClass alias of the pinned AMI release (Karpenter docs, "spec.amiSelectorTerms": alias is
    `family@version`, the version being the AMI's GitHub release tag: al2023@v20240807, bottlerocket@v1.20.4).

    The versions recipe pins `<k8s patch>-<YYYYMMDD>` (AL2023) and `<OS version>-<commit>` (Bottlerocket)
    for managed node groups; the alias takes the date or the OS version of the same release, so both paths
    run the same image."""
    versions = spec.versions
    if pool.ami_family == "BOTTLEROCKET_NVIDIA":
        release = versions.bottlerocket_nvidia_release or ""
        return f"bottlerocket@v{release.split('-')[0]}"
    release = versions.al2023_nvidia_ami_release or ""
    return f"al2023@v{release.rsplit('-', 1)[-1]}"


def _types(pool: NodePool) -> list[catalog.InstanceType]:
    return [catalog.CATALOG[t] for t in allowed_instance_types(pool)]


def limits(pool: NodePool) -> dict[str, str]:
    """The pool's maximum as NodePool limits: GPUs exactly, CPU and memory of the largest allowed type."""
    types, n = _types(pool), pool.max_size or 0
    return {
        "nvidia.com/gpu": str(n * max(t.gpus for t in types)),
        "cpu": str(n * max(t.vcpus for t in types)),
        "memory": f"{n * max(t.memory_gib for t in types)}Gi",
    }


def termination_grace_period(pool: NodePool) -> str | None:
    """The pool's `karpenter.terminationGracePeriod`, or the default of its shortest-notice capacity."""
    settings = pool.karpenter
    if settings and settings.termination_grace_period:
        given = settings.termination_grace_period
        return None if given == "Never" else given
    kinds = set(capacity_types(pool))
    if "spot" in kinds:
        return TERMINATION_GRACE["spot"]
    if pool.capacity_type == "CAPACITY_BLOCK":
        return TERMINATION_GRACE["capacity-block"]
    return TERMINATION_GRACE["on-demand"]


def _budgets(pool: NodePool, kind: str) -> list[dict[str, Any]]:
    settings = pool.karpenter
    if settings and settings.budgets is not None:
        budgets = settings.budgets
    elif kind == "training":
        budgets = [
            # The grace period lets drift drain do-not-disrupt pods: no drift of busy training nodes.
            DisruptionBudget(nodes="0", reasons=["Drifted"]),
            DisruptionBudget(nodes="20%", reasons=["Empty"]),
        ]
    else:
        budgets = [
            DisruptionBudget(
                nodes="1", reasons=["Drifted", "Underutilized"]
            ),  # an AMI bump, a node at a time
            DisruptionBudget(nodes="20%", reasons=["Empty"]),
        ]
    out = []
    for budget in budgets:
        entry = budget.model_dump(by_alias=True, exclude_none=True)
        if not entry["reasons"]:
            del entry["reasons"]  # no reasons: the budget applies to every reason
        out.append(entry)
    return out


def plan_pool(spec: ClusterSpec, pool: NodePool) -> KarpenterPoolPlan:
    settings = pool.karpenter
    kind = workload(pool)
    policy = (settings.consolidation_policy if settings else None) or (
        "WhenEmpty" if kind == "training" else "WhenEmptyOrUnderutilized"
    )
    after = (settings.consolidate_after if settings else None) or (
        TRAINING_CONSOLIDATE_AFTER if kind == "training" else INFERENCE_CONSOLIDATE_AFTER
    )
    if only_reserved(pool):
        policy, after = "WhenEmpty", "Never"  # paid for whether used or not: keep the nodes
    return KarpenterPoolPlan(
        pool=pool.name,
        instance_types=tuple(allowed_instance_types(pool)),
        capacity_types=tuple(capacity_types(pool)),
        zones=tuple(zones(spec, pool)),
        workload=kind,
        consolidation_policy=policy,
        consolidate_after=after,
        expire_after=settings.expire_after if settings else "Never",
        termination_grace_period=termination_grace_period(pool),
        limits=limits(pool),
        reservation_id=pool.capacity_reservation_id,
    )


def _requirement(key: str, values: list[str]) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": values}


def node_pool(spec: ClusterSpec, pool: NodePool) -> dict[str, Any]:
    plan = plan_pool(spec, pool)
    view = pool_view(spec, pool)
    types = _types(pool)
    budgets = _budgets(pool, plan.workload)
    weight = max(PRIORITY["CAPACITY_BLOCK" if "reserved" in plan.capacity_types else pool.capacity_type], 1)
    return {
        "apiVersion": NODEPOOL_API,
        "kind": "NodePool",
        "metadata": metadata(pool.name),
        "spec": {
            "weight": weight,
            "limits": plan.limits,
            "disruption": {
                "consolidationPolicy": plan.consolidation_policy,
                "consolidateAfter": plan.consolidate_after,
                "budgets": budgets,
            },
            "template": {
                "metadata": {"labels": gpu_labels(view, str(pool.ami_family))},
                "spec": {
                    "nodeClassRef": {"group": NODECLASS_GROUP, "kind": "EC2NodeClass", "name": pool.name},
                    "requirements": [
                        _requirement(INSTANCE_TYPE, list(plan.instance_types)),
                        _requirement(ARCH, sorted({ARCHES[t.arch] for t in types})),
                        _requirement(CAPACITY_TYPE, list(plan.capacity_types)),
                        _requirement(ZONE, list(plan.zones)),
                    ],
                    "taints": [dict(t) for t in view.taints],
                    "expireAfter": plan.expire_after,
                    **(
                        {"terminationGracePeriod": plan.termination_grace_period}
                        if plan.termination_grace_period
                        else {}
                    ),
                },
            },
        },
    }


def _block_devices(pool: NodePool) -> list[dict[str, Any]]:
    family = str(pool.ami_family)

    def ebs(size: int) -> dict[str, Any]:
        return {
            "volumeSize": f"{size}Gi",
            "volumeType": "gp3",
            "encrypted": True,
            "deleteOnTermination": True,
        }

    data = {"deviceName": lt.ROOT_DEVICE[family], "ebs": ebs(pool.root_volume_gi_b)}
    if family == "BOTTLEROCKET_NVIDIA":
        return [{"deviceName": "/dev/xvda", "ebs": ebs(BOTTLEROCKET_OS_VOLUME_GIB)}, data]
    return [{**data, "rootVolume": True}]


def efa_interfaces(pool: NodePool) -> list[dict[str, Any]]:
    """EFA on every network card without spending VPC addresses on them: the primary ENA interface, then one
    `efa-only` device per card (Karpenter docs, "spec.networkInterfaces"; the CRD allows one per card)."""
    cards = min(t.efa_interfaces for t in _types(pool))
    out = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]
    out += [
        {"networkCardIndex": card, "deviceIndex": 1 if card == 0 else 0, "interfaceType": "efa-only"}
        for card in range(cards)
    ]
    return out


def node_class(spec: ClusterSpec, pool: NodePool) -> dict[str, Any]:
    cluster = spec.cluster.name
    metadata_options = lt.metadata_options()
    body: dict[str, Any] = {
        "role": node_role_name(spec),
        "amiSelectorTerms": [{"alias": ami_alias(spec, pool)}],
        "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster}}],
        "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster}}],
        "metadataOptions": {
            "httpEndpoint": metadata_options["http_endpoint"],
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": metadata_options["http_put_response_hop_limit"],
            "httpTokens": metadata_options["http_tokens"],
        },
        "blockDeviceMappings": _block_devices(pool),
        "tags": {**common_tags(spec), "gpufleet.io/pool": pool.name},
    }
    if pool.ami_family == "AL2023_NVIDIA":  # the same first-boot script as the managed node groups
        body["userData"] = mime_user_data(gpu_node_script())
    if pool.efa:
        body["networkInterfaces"] = efa_interfaces(pool)
    if group := placement_group_name(spec, pool):
        body["placementGroupSelector"] = {"name": group}
    if reserved(pool) and pool.capacity_reservation_id:
        body["capacityReservationSelectorTerms"] = [{"id": pool.capacity_reservation_id}]
    return {
        "apiVersion": NODECLASS_API,
        "kind": "EC2NodeClass",
        "metadata": metadata(pool.name),
        "spec": body,
    }


def karpenter_objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every EC2NodeClass, then every NodePool (a NodePool refers to its class), in spec order."""
    pools = karpenter_pools(spec)
    return [*(node_class(spec, p) for p in pools), *(node_pool(spec, p) for p in pools)]
