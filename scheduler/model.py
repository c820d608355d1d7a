"""The compiler's inputs: small, frozen, pulumi-free views of the node pools and the team policy.

`infra` builds these from the cluster spec; the scheduler never sees the spec itself, so it can be compiled,
tested and benchmarked without the infra package. Fields may be added (with defaults), never renamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

CapacityType = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"]
SharingMode = Literal["exclusive", "timeSlicing", "mig", "draShares"]
# MostAllocated / LeastAllocated: kube-scheduler's NodeResourcesFit scoring. FragmentationAware: the in-cluster
# secondary scheduler (MostAllocated) calling the fragmentation-aware extender (scheduler.extender).
PlacementStrategy = Literal["MostAllocated", "LeastAllocated", "FragmentationAware"]
PLACEMENT_STRATEGIES: tuple[str, ...] = ("MostAllocated", "LeastAllocated", "FragmentationAware")
FitStrategy = Literal["MostAllocated", "LeastAllocated"]


def fit_strategy(strategy: str) -> FitStrategy:
    """The NodeResourcesFit scoring type a placement strategy sends: FragmentationAware packs
    (MostAllocated) underneath the extender, which is also what places pods while the extender is down."""
    return "LeastAllocated" if strategy == "LeastAllocated" else "MostAllocated"


@dataclass(frozen=True)
class PoolView:
    """One GPU node pool as the scheduler needs it: what a node offers and how many nodes there can be."""

    name: str
    gpu_model: str
    gpus_per_node: int
    max_nodes: int
    labels: dict[str, str]  # node labels of the pool, including "gpufleet.io/pool": name
    taints: tuple[dict[str, str], ...]  # {key, value, effect}; always includes nvidia.com/gpu=true:NoSchedule
    capacity_type: CapacityType = "ON_DEMAND"
    sharing: SharingMode = "exclusive"
    time_slicing_replicas: int | None = None
    mig_profile: str | None = None  # e.g. "1g.10gb"
    mig_instances_per_gpu: int | None = None  # MIG pools: instances of mig_profile per GPU (from the catalog)
    dra_shares: int | None = None  # draShares pools: the shares each GPU is cut into (scheduler.dra)
    cpus_per_node: int | None = None
    memory_gib_per_node: int | None = None
    # (milli-CPU, MiB) a node offers pods: its allocatable less its DaemonSets' requests, where the platform
    # says (EKS); None: the whole node. What a GPU unit's share of cores and memory is cut from.
    pod_room: tuple[int, int] | None = None
    oversubscribe: bool = False
    node_group: str | None = (
        None  # autoscaling group / node group name regex (priority expander); None: existing
    )
    efa_per_node: int = 0  # EFA interfaces (vpc.amazonaws.com/efa) a node of an EFA pool advertises
    # Node labels of the pool's network (or NVLink) topology, broadest first, ending with the host name;
    # empty: the pool is not topology-aware.
    topology_levels: tuple[str, ...] = ()

    @property
    def max_gpus(self) -> int:
        return self.max_nodes * self.gpus_per_node

    @property
    def provisionable(self) -> bool:
        """Whether the cluster-autoscaler adds this pool's nodes, so a ProvisioningRequest can be answered: a
        DRA-shared pool is static (infra.shares), and no autoscaler counts its shares."""
        return bool(self.node_group) and self.sharing != "draShares"


@dataclass(frozen=True)
class TeamPolicy:
    """One team: its namespace, GPU quota per pool, borrowing/lending limits (GPUs per pool) and priority."""

    name: str
    namespace: str
    quotas: dict[str, int]  # pool name -> GPUs
    borrowing_limit: int | None = None  # None: unlimited
    lending_limit: int | None = None  # None: lends all of its quota
    priority: str = "default"  # default WorkloadPriorityClass of the team's jobs
    groups: tuple[str, ...] = ()
    weight: float = 1.0  # fair-sharing weight
    cpu_quota: int = 32  # cores for CPU-only work
    memory_quota_gib: int = 128  # GiB for CPU-only work
    external_services: bool = False  # may create LoadBalancer/NodePort Services in its namespace


@dataclass(frozen=True)
class PriorityClassView:
    name: str
    value: int
    description: str = ""


@dataclass(frozen=True)
class SchedulingPolicy:
    """Everything the compiler needs besides the pools."""

    cohort: str = "gpufleet"
    teams: tuple[TeamPolicy, ...] = ()
    priority_classes: tuple[PriorityClassView, ...] = (
        PriorityClassView("production", 1000, "Guaranteed work; preempts lower priorities."),
        PriorityClassView("default", 100, "Normal jobs."),
        PriorityClassView("preemptible", 10, "Opportunistic jobs on borrowed GPUs."),
    )
    placement_strategy: PlacementStrategy = "MostAllocated"
    placement_weights: dict[str, int] = field(
        default_factory=lambda: {"nvidia.com/gpu": 10, "cpu": 1, "memory": 1}
    )
    borrow_within_cohort_max_priority: int = 100
    fair_sharing: bool = True
    # Kueue's `fairSharing.preemptionStrategies`, in order (the spec checks the order is one Kueue accepts)
    fair_preemption_strategies: tuple[str, ...] = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    wait_for_pods_ready_timeout: str = "30m"
    provisioning_requests: bool = False
    # the pools whose flavors carry the check; empty: every autoscaled GPU pool
    provisioning_pools: tuple[str, ...] = ()
    platform: Literal["aws", "existing"] = "aws"
    kubernetes_version: str = "1.35"
    kube_scheduler_image_tag: str = "v1.35.2"
    # The Kueue release the cluster runs: the chart and image tags (infra.versions.KUEUE_VERSION, never a default here).
    kueue_version: str = field(kw_only=True)
    autoscaler_namespace: str = (
        "kube-system"  # where the cluster-autoscaler reads its priority-expander ConfigMap
    )
    # The ProvisioningRequest CRD (kubernetes/autoscaler, the autoscaler's release tag) installed before Kueue
    # when provisioning_requests is on: Kueue only starts its provisioning controller if the CRD exists.
    provisioning_request_crd: str = ""
    metrics: bool = False  # Kueue exposes Prometheus metrics (a Prometheus operator runs: its ServiceMonitor)
    # A pool shares its GPUs through DRA (scheduler.dra): Kueue counts the shares (its deviceClassMappings).
    dra_shares: bool = False
    # Namespaces whose pods may reach team pods (NetworkPolicy).
    platform_namespaces: tuple[str, ...] = ("monitoring", "ingress")
    # FragmentationAware: the extender's pinned image (infra.versions); empty otherwise.
    extender_image: str = ""
    extender_shadow: bool = False  # FragmentationAware: the extender scores without deciding (--shadow)
    # The nodes CPU-only work runs on (the `cpu-only` flavor's node labels); empty: any untainted node.
    cpu_node_labels: dict[str, str] = field(default_factory=dict)
    kuberay_namespace: str = "ray-system"  # the KubeRay operator's: it reaches each Ray head's dashboard
    # Kubernetes PriorityClasses team pods may name (none: any PriorityClass is refused in team namespaces).
    pod_priority_classes: tuple[str, ...] = ()
    # The longest terminationGracePeriodSeconds a team GPU pod may ask (a duration: 30s, 5m).
    max_termination_grace_period: str = "5m"

    @property
    def tolerates_named_gpus(self) -> bool:
        """The API server gives a pod that names a GPU resource, even at 0, the GPU taint's toleration: EKS runs
        the ExtendedResourceToleration admission plugin on every platform version (its user guide, "View Amazon
        EKS platform versions"); an existing cluster's API server is not ours to know, and kubeadm leaves it off."""
        return self.platform == "aws"

    @property
    def uses_secondary_scheduler(self) -> bool:
        """Team GPU pods are bound by the in-cluster secondary scheduler (`gpu-binpack`): on existing clusters,
        whose control plane is not ours, and with FragmentationAware everywhere, since the EKS control plane's
        scheduler configuration takes a NodeResourcesFit scoring strategy and no extenders."""
        return self.platform == "existing" or self.placement_strategy == "FragmentationAware"
