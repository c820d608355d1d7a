"""Inputs of the dynamic simulation: pools that scale, queues with quotas, and jobs that arrive and finish.

The placement replay (``scheduler.sim.runner``) answers where pods land when they arrive and never leave. The
dynamic simulation adds time: jobs arrive, wait in their team's queue, are admitted against quota (Kueue's
ClusterQueues), get nodes (the placement policy, the autoscaler), run for their duration and leave. Everything
here is plain data; ``infra.simulate.dynamic`` builds it from a stack's compiled policy.

Quota is counted in a pool's own units, as Kueue counts the pool's resource: one unit per GPU for an exclusive
pool (``nvidia.com/gpu``), ``replicas`` per GPU for a time-sliced pool (``nvidia.com/gpu.shared``), the MIG
instances per GPU for a MIG pool. A pod asking whole GPUs takes ``num_gpu`` units of an exclusive pool; a pod
asking part of a GPU takes one unit of a sharing pool (the device plugin gives a container one replica).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.provisioning import SCAN_INTERVAL_S


@dataclass(frozen=True)
class Pool:
    """A node group: its nodes (indices into the cluster), quota units per GPU and how it scales."""

    name: str
    nodes: tuple[int, ...]
    units_per_gpu: int = 1
    min_nodes: int = 0
    provision_s: float = 600.0  # from the autoscaler's decision to a Ready node
    node_price_hour: float | None = None  # None: no price known (bare metal)
    # A job runs ``duration / speed`` here: the trace's durations are times on the reference GPU (speed 1)
    speed: float = 1.0
    gpu_power_w: float | None = None  # one GPU's power draw (board power); None: not known
    # the resource name Kueue counts the pool's quota in (nvidia.com/gpu, ...): fair sharing sums a node's
    # borrowing per resource name over flavors; "": the pool is a resource of its own
    resource: str = ""
    # how long a node stays empty before it goes: the group's scale-down unneeded time (cluster-autoscaler),
    # or the NodePool's consolidateAfter (Karpenter); None: `Settings.scale_down_unneeded_s`; inf: never
    unneeded_s: float | None = None
    # Karpenter's pool (consolidation, no cluster-autoscaler cool-down, no ProvisioningRequests) rather than a
    # cluster-autoscaler node group
    karpenter: bool = False
    # a capacity block: (start, end) seconds on the run's clock; nodes exist only inside it, are never removed
    # within it, and the block is paid for whole, every node for the whole window; None: bought by the hour
    window: tuple[float, float] | None = None


@dataclass(frozen=True)
class Queue:
    """A team's ClusterQueue: per pool its nominal quota, borrowing and lending limits (None: no limit).

    ``flavors`` is the order Kueue tries the pools in (the resource group's flavor list); a pool missing from
    it is one the team cannot use at all."""

    name: str
    flavors: tuple[str, ...]
    nominal: dict[str, int]
    borrowing_limit: dict[str, int | None] = field(default_factory=dict)
    lending_limit: dict[str, int | None] = field(default_factory=dict)
    # the team's fair-sharing weight (reported against the share the team got): under fair sharing the weight
    # of ``cohort`` when set (the ClusterQueue itself then weighs 1), else of the ClusterQueue
    weight: float = 1.0
    cohort: str = ""  # the team Cohort between the ClusterQueue and the root cohort; "": under the root
    # the pools (flavors) the ClusterQueue's ProvisioningRequest admission check covers (`onFlavors`): a job
    # given quota there is admitted only once its request is provisioned (scheduler.provisioning)
    checked: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    """How the cluster behaves: Kueue's queueing and preemption, the autoscaler, the placement policy."""

    policy: str = "MostAllocated"
    policy_params: dict[str, int] = field(default_factory=dict)
    autoscale: bool = True  # False: every node of every pool is up all the time
    strict_fifo: bool = False  # StrictFIFO: a head that does not fit blocks the jobs behind it
    # Kueue's `fairSharing` configured: admission by dominant resource share and fairPreemptions
    # (scheduler.sim.dynamic.fair_sharing, fair_preemption); False: the classical order and preemption
    fair_sharing: bool = False
    # Kueue's `fairSharing.preemptionStrategies`, in order: the first runs over every candidate, a second (always
    # LessThanInitialShare) over those the first refused (scheduler.sim.dynamic.fair_preemption)
    fair_preemption_strategies: tuple[str, ...] = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    reclaim_within_cohort: bool = True  # Kueue `reclaimWithinCohort: Any`
    preempt_lower_priority: bool = True  # Kueue `withinClusterQueue: LowerPriority`
    # Kueue `borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: N}`: a job that borrows may still
    # reclaim lent quota from lower-priority work of priority at most N; None: `Never`, the API's default
    borrow_within_cohort_max_priority: int | None = None
    pods_ready_timeout_s: float | None = 1800.0  # Kueue `waitForPodsReady.timeout`; None: off
    # Kueue's batched requeue of inadmissible workloads after quota is released (v0.19.2
    # pkg/cache/queue/inadmissible_workloads.go requeueBatchPeriod); 0: every waiting job is retried at once
    requeue_batch_s: float = 1.0
    scale_down_unneeded_s: float = 600.0  # cluster-autoscaler `--scale-down-unneeded-time`
    # cluster-autoscaler `--scale-down-delay-after-add`: no node group shrinks this long after any scale-up
    # (the autoscaler's start counts as one, core/static_autoscaler.go `isScaleDownInCooldown`); 0: none
    scale_down_delay_after_add_s: float = 0.0
    scan_interval_s: float = SCAN_INTERVAL_S  # cluster-autoscaler `--scan-interval`: its loop, for requests
    seed: int = 42


@dataclass(frozen=True, eq=False)
class Jobs:
    """Jobs in arrival order. ``workload`` has one row per job: the request of each of its ``pods`` pods, with
    ``gpu_spec`` the pools the job may use (``a|b``); ``queue`` indexes the queues, ``priority`` is the
    WorkloadPriorityClass value."""

    arrival: np.ndarray  # seconds
    duration: np.ndarray  # seconds of running once every pod runs
    pods: np.ndarray
    queue: np.ndarray
    priority: np.ndarray
    workload: Workload

    def __post_init__(self) -> None:
        n = self.workload.size
        if not (len(self.arrival) == len(self.duration) == len(self.pods) == len(self.queue) == n):
            raise ValueError("job arrays must all have one entry per job")
        if len(self.priority) != n:
            raise ValueError("job arrays must all have one entry per job")

    @property
    def size(self) -> int:
        return self.workload.size

    @property
    def gpus(self) -> np.ndarray:
        """GPU-equivalents each job holds while it runs (pods x GPUs x fraction)."""
        return self.pods * self.workload.num_gpu * self.workload.gpu_milli / MILLI


@dataclass(frozen=True, eq=False)
class World:
    """One dynamic simulation's whole input."""

    cluster: Cluster  # gpu_model of a node = its pool's name
    pools: tuple[Pool, ...]
    queues: tuple[Queue, ...]
    jobs: Jobs
    settings: Settings = Settings()

    def gpus_per_node(self, pool: Pool) -> int:
        """GPUs of the pool's largest node (0 for a pool without nodes)."""
        return int(self.cluster.num_gpu[list(pool.nodes)].max()) if pool.nodes else 0

    def unneeded_s(self, pool: Pool) -> float:
        """How long a node of ``pool`` stays empty before it goes (inf: never)."""
        return self.settings.scale_down_unneeded_s if pool.unneeded_s is None else pool.unneeded_s

    def capacity_units(self, pool: Pool) -> int:
        """Quota units the pool holds with every node up: what a cohort can lend at most."""
        return len(pool.nodes) * self.gpus_per_node(pool) * pool.units_per_gpu
