"""The typed cluster spec: the single source of truth, read from a stack's `gpufleet:` config.

Every part of the toolkit (the Pulumi program, the planner, the scheduler component, the simulator and the
Ansible inventory) reads this object and nothing else, so a pool is described exactly once. Unknown keys are
errors (typos must not silently fall back to defaults), and every problem names its exact key path, e.g.
`gpufleet:nodePools[1].maxSize`. Field rules live on the models; rules that span fields live in `infra.rules`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from infra.versions import DEFAULT_KUBERNETES, Versions

NAMESPACE = "gpufleet"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
Name = Annotated[str, Field(pattern=DNS_LABEL, min_length=1, max_length=40)]
Count = Annotated[int, Field(ge=0)]
# A Prometheus-style duration: 30s, 15m, 2h, 7d.
Duration = Annotated[str, Field(pattern=r"^[1-9]\d*(s|m|h|d)$")]
# A Kubernetes label key: optional DNS-subdomain prefix and "/", then a name of up to 63 characters.
LabelKey = Annotated[
    str,
    Field(pattern=r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"),
]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class EndpointAccess(Model):
    """Private API endpoint by default; a public one only behind an explicit CIDR allow-list.

    The machine that runs the deploy installs the add-ons through this endpoint, so it must reach it: through
    the public endpoint (its address inside `publicCidrs`), or through the private one from a network connected
    to the VPC (VPN, peering, Direct Connect), which needs a port-443 rule on the cluster security group from
    `privateAccessCidrs` or `privateAccessSecurityGroupIds`. Preflight checks which one applies.
    """

    public: bool = False
    public_cidrs: list[str] = Field(default_factory=list)
    # private endpoint: the connected networks (CIDRs) or security groups allowed to reach it on port 443
    private_access_cidrs: list[str] = Field(default_factory=list)
    private_access_security_group_ids: list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list
    )

    @field_validator("public_cidrs", "private_access_cidrs")
    @classmethod
    def _cidrs(cls, cidrs: list[str]) -> list[str]:
        for cidr in cidrs:
            try:
                net = ipaddress.ip_network(cidr, strict=True)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR block such as 203.0.113.0/24 ({exc})") from None
            if net.prefixlen == 0:
                raise ValueError(
                    f"{cidr!r} opens the API endpoint to the whole internet; list your own ranges"
                )
        return cidrs


class Network(Model):
    """A new VPC (default) or bring-your-own VPC and subnet ids."""

    vpc_cidr: str = "10.0.0.0/16"
    nat_gateways: Literal["single", "perAz"] = "single"
    vpc_id: str | None = None
    private_subnet_ids: list[str] = Field(default_factory=list)
    public_subnet_ids: list[str] = Field(default_factory=list)

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, value: str) -> str:
        try:
            ipaddress.ip_network(value, strict=True)
        except ValueError:
            raise ValueError(f"{value!r} is not a CIDR block such as 10.0.0.0/16") from None
        return value


class PrometheusStorage(Model):
    """`install`: the persistent volume Prometheus keeps its TSDB on, so a restart or reschedule keeps the usage
    history (the chart's default `storageSpec: {}` is an emptyDir)."""

    size: Annotated[str, Field(pattern=r"^[1-9]\d*(Gi|Ti)$")] = "50Gi"
    storage_class: Name | None = None  # default: the cluster's default StorageClass


class SecretKey(Model):
    """A key of a Secret in `monitoring.namespace` that the user creates: Alertmanager reads it as a file, so the
    value never appears in the stack, the chart values or Pulumi's state."""

    secret: Name
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]


class SlackReceiver(Model):
    webhook_url: SecretKey  # the Slack incoming-webhook URL
    channel: str | None = None  # default: the webhook's own channel


class PagerDutyReceiver(Model):
    routing_key: SecretKey  # the Events API v2 integration (routing) key


class EmailReceiver(Model):
    to: Annotated[str, Field(pattern=r"^[^@\s,]+@[^@\s,]+$")]
    from_address: Annotated[str, Field(pattern=r"^[^@\s,]+@[^@\s,]+$")]
    smarthost: Annotated[str, Field(pattern=r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")]  # host:port of the SMTP relay
    username: str | None = None
    password: SecretKey | None = None
    require_tls: bool = True


class AlertReceiver(Model):
    name: Name
    slack: SlackReceiver | None = None
    pagerduty: PagerDutyReceiver | None = None
    email: EmailReceiver | None = None

    @model_validator(mode="after")
    def _one_channel(self) -> AlertReceiver:
        if not (self.slack or self.pagerduty or self.email):
            raise ValueError(f"receiver {self.name!r} needs at least one of slack, pagerduty, email")
        return self


class Alertmanager(Model):
    """`install`: where the chart's Alertmanager delivers. `routes` maps a severity (`critical`, `warning`,
    `info`) to a receiver; severities not routed go to `default` (none: dropped, the chart's `null`)."""

    receivers: list[AlertReceiver] = Field(default_factory=list)
    routes: dict[Literal["critical", "warning", "info"], Name] = Field(default_factory=dict)
    default: Name | None = None
    # The receiver of the chart's always-firing Watchdog alert, every minute: a dead man's switch service that
    # raises an alarm when the heartbeat stops (Prometheus, its rules or Alertmanager down). None: dropped.
    watchdog: Name | None = None

    @model_validator(mode="after")
    def _known_receivers(self) -> Alertmanager:
        names = [r.name for r in self.receivers]
        if len(set(names)) != len(names):
            raise ValueError(f"receivers: duplicate names in {names}")
        wanted = {f"routes.{sev}": name for sev, name in self.routes.items()}
        if self.default:
            wanted["default"] = self.default
        if self.watchdog:
            wanted["watchdog"] = self.watchdog
        for key, name in wanted.items():
            if name not in names:
                raise ValueError(
                    f"{key}: no receiver named {name!r} (receivers: {', '.join(names) or 'none'})"
                )
        return self


class Monitoring(Model):
    """Where metrics go. `true`/`false` from older stacks mean `{prometheus: existing}` / `{prometheus: none}`:
    `true` always meant "a Prometheus operator already runs; add gpufleet's monitors to it"."""

    prometheus: Literal["install", "existing", "none"] = "none"
    grafana: bool = False
    retention: Annotated[str, Field(pattern=r"^\d+(h|d|w|y)$")] = "15d"
    # The chart's Prometheus selects monitors and rules labelled `release: <release>` (kube-prometheus-stack's
    # default); on `existing`, the Helm release name of the stack already running.
    release: Name = "kube-prometheus-stack"
    # Where the stack (install) and gpufleet's rules and dashboards live.
    namespace: Name = "monitoring"
    scrape_interval: Duration = "30s"
    # Alert and report thresholds; a team's own `idleAfter` / `pendingAfter` win.
    idle_after: Duration = "2h"  # an allocated GPU below 5% utilisation this long is idle
    pending_after: Duration = "1h"  # a team's GPU workloads wait this long without an admission
    # The master switch for `invoke reclaim --apply`; each team opts in with its own `reclaimIdle` too.
    reclaim_idle: bool = False
    # Existing clusters: GPU faults from DCGM health cordon and taint the node (NVSentinel); `drain` also
    # evicts its pods; `off` installs nothing. EKS uses the node monitoring agent and node auto repair.
    self_healing: Literal["off", "cordon", "drain"] = "cordon"
    # `install`: Prometheus' persistent volume and the TSDB size at which it drops the oldest blocks (Prometheus
    # ByteSize, e.g. 40GB; default 85% of the volume, so a full disk never stops ingestion).
    storage: PrometheusStorage = PrometheusStorage()
    retention_size: Annotated[str, Field(pattern=r"^[1-9]\d*(MB|GB|TB)$")] | None = None
    # `install`: Alertmanager receivers and severity routes (default: the chart's, which deliver nothing).
    alertmanager: Alertmanager | None = None
    # Absolute base of the alerts' `runbook_url` (your copy of docs/operations.md as a web page, e.g.
    # https://git.example.com/org/gpufleet/blob/main/docs/operations.md); none: a `runbook` path annotation.
    runbook_base_url: Annotated[str, Field(pattern=r"^https?://[^\s#]+$")] | None = None

    @model_validator(mode="after")
    def _install_only(self) -> Monitoring:
        if self.alertmanager is not None and self.prometheus != "install":
            raise ValueError(
                "alertmanager: configures the Alertmanager of `prometheus: install`; on `existing` configure "
                "that stack's Alertmanager"
            )
        return self

    @property
    def retention_bytes(self) -> str:
        """`retentionSize`, or 85% of the volume in GB (Prometheus' GB are 2^30 bytes, the volume's Gi)."""
        if self.retention_size:
            return self.retention_size
        number, unit = int(self.storage.size[:-2]), self.storage.size[-2:]
        gib = number * (1024 if unit == "Ti" else 1)
        return f"{max(1, gib * 85 // 100)}GB"

    @model_validator(mode="before")
    @classmethod
    def _from_bool(cls, value: Any) -> Any:
        if value is True:
            return {"prometheus": "existing"}
        if value is False or value is None:
            return {"prometheus": "none"}
        return value

    @property
    def enabled(self) -> bool:
        """gpufleet's monitors and rules are created (a Prometheus operator runs or is installed)."""
        return self.prometheus != "none"


class Addons(Model):
    """existing platform: which of the in-cluster add-ons gpufleet installs, and which it adopts.

    `install` (default): gpufleet installs the pinned chart. `existing`: the cluster already runs it (another
    team's release, a GitOps install, the twin); gpufleet installs nothing for it, and preflight checks that it
    runs at the pinned version (its Deployment's `app.kubernetes.io/version`), since the objects gpufleet
    creates are written for that version's API.
    """

    gpu_operator: Literal["install", "existing"] = "install"
    kueue: Literal["install", "existing"] = "install"


class Cluster(Model):
    name: Annotated[str, Field(pattern=r"^[a-zA-Z][a-zA-Z0-9-]{0,99}$")]
    kubernetes_version: str = DEFAULT_KUBERNETES
    endpoint_access: EndpointAccess = EndpointAccess()
    kubeconfig: str | None = None  # existing platform: path to the kubeconfig file
    kubeconfig_context: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    # aws: the tags also go on node group instances and volumes (the launch template's tag specifications);
    # off by default, since a new launch template version rolls every node of the group, so a tag edit would.
    tag_nodes: bool = False
    admin_role_arns: list[Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")]] = Field(
        default_factory=list
    )
    availability_zones: list[str] | None = None  # default: the region's a, b, c
    network: Network = Network()
    monitoring: Monitoring = Monitoring()
    # aws: which autoscaler provisions GPU nodes (docs/aws.md, "Choosing an autoscaler").
    autoscaler: Literal["cluster-autoscaler", "karpenter"] = "cluster-autoscaler"
    driver_managed_by: Literal["host", "operator"] = "host"  # existing platform: Ansible or the GPU operator
    addons: Addons = Addons()  # existing platform: install or adopt the GPU operator and Kueue
    # existing platform: what runs the teams' jobs on the hosts, Kubernetes with Kueue or Slurm (docs/slurm.md)
    orchestrator: Literal["kubernetes", "slurm"] = "kubernetes"


class SystemPool(Model):
    """On-demand CPU nodes for add-ons (autoscaler, operators, Kueue)."""

    instance_type: str = "m6i.xlarge"
    min_size: Count = 2
    desired_size: Count = 2
    max_size: Count = 4


class Taint(Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class TimeSlicing(Model):
    replicas: Annotated[int, Field(ge=2, le=64)]


class DraShares(Model):
    """GPU shares through Dynamic Resource Allocation: each GPU is one device that many claims may share, cut
    into `shares` equal shares (the NVIDIA DRA driver's `--consumable-shares=<shares>`), counted by Kueue."""

    shares: Annotated[int, Field(ge=2, le=64)] = 8


DRA_SHARES = "dra-shares"  # the short form: `sharing: dra-shares` (the default share count)


class Sharing(Model):
    """How a pool's GPUs are shared: whole GPUs (exclusive), time-slicing replicas, one MIG profile, or shares
    allocated through DRA (`dra-shares`, Kubernetes 1.36 and later)."""

    time_slicing: TimeSlicing | None = None
    mig: str | None = None
    dra_shares: DraShares | None = None

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, value: Any) -> Any:
        if value in ("exclusive", None, {}):
            return {}
        if value == DRA_SHARES:
            return {"draShares": {}}
        if isinstance(value, dict) and len(value) == 1 and set(value) <= {"timeSlicing", "mig", "draShares"}:
            return {"draShares": value["draShares"] or {}} if "draShares" in value else value
        raise ValueError(
            f"got {value!r}; accepted (one mode per pool): exclusive | {{timeSlicing: {{replicas: N}}}} | "
            f"{{mig: <profile>}} | {DRA_SHARES} | {{draShares: {{shares: N}}}}"
        )

    @property
    def mode(self) -> Literal["exclusive", "timeSlicing", "mig", "draShares"]:
        if self.time_slicing:
            return "timeSlicing"
        if self.dra_shares:
            return "draShares"
        return "mig" if self.mig else "exclusive"


DURATION = r"^(([0-9]+(s|m|h))+|Never)$"  # Karpenter's duration pattern (NodePool CRD, v1.14.1)


class DisruptionBudget(Model):
    """One Karpenter disruption budget: at most `nodes` (a count or a percentage) disrupted at once, for the
    listed reasons (all when empty), optionally only in a cron `schedule` window of `duration`."""

    nodes: Annotated[str, Field(pattern=r"^((100|[0-9]{1,2})%|[0-9]+)$")]
    reasons: list[Literal["Underutilized", "Empty", "Drifted"]] = Field(default_factory=list)
    schedule: str | None = None
    duration: Annotated[str, Field(pattern=r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$")] | None = None

    @model_validator(mode="after")
    def _window(self) -> DisruptionBudget:
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("schedule and duration go together (a cron window and its length)")
        return self


class KarpenterPool(Model):
    """Karpenter-only settings of a GPU pool (`cluster.autoscaler: karpenter`); every key has a GPU-safe default.

    `workload` decides disruption: training nodes are consolidated only when empty, inference nodes also when
    underutilised. Capacity types default to the pool's `capacityType` (`reserved` for a capacity block)."""

    workload: Literal["training", "inference"] = "training"
    capacity_types: Annotated[list[Literal["on-demand", "spot", "reserved"]], Field(min_length=1)] | None = (
        None
    )
    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized"] | None = None
    consolidate_after: Annotated[str, Field(pattern=DURATION)] | None = None
    expire_after: Annotated[str, Field(pattern=DURATION)] = "Never"
    # How long a node being terminated (Spot interruption, capacity-block end, node deletion, `invoke
    # destroy`) waits for do-not-disrupt pods before deleting them; `Never` waits for ever. Default from the
    # pool's capacity types (infra.aws.karpenter.pools.termination_grace_period).
    termination_grace_period: Annotated[str, Field(pattern=DURATION)] | None = None
    budgets: list[DisruptionBudget] | None = None
    # With a grace period, a drifted node is drained despite do-not-disrupt and its running training pods are
    # deleted when the period ends: a `Drifted` budget above 0 on a training pool needs this opt-in (or
    # `terminationGracePeriod: Never`, under which drift waits for the pods).
    drain_busy_nodes_on_drift: bool = False


AL2_REFUSED = "AL2 GPU AMIs reached end of support on 2025-11-26; use AL2023_NVIDIA or BOTTLEROCKET_NVIDIA"


class NodePool(Model):
    """A GPU pool: an EKS managed node group (aws) or a host group prepared by Ansible (existing)."""

    name: Name
    # aws
    instance_type: str | None = None
    # aws: several types of the same GPU model and count (Spot diversification; Karpenter requirements)
    instance_types: list[str] | None = None
    capacity_type: Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"] = "ON_DEMAND"
    capacity_reservation_id: Annotated[str, Field(pattern=r"^cr-[0-9a-f]{8,17}$")] | None = None
    availability_zone: str | None = None
    # aws: the zones this pool's nodes may use (default: the cluster's); p5/g6e are not offered everywhere
    availability_zones: list[str] | None = None
    ami_family: Literal["AL2023_NVIDIA", "BOTTLEROCKET_NVIDIA"] = "AL2023_NVIDIA"
    efa: bool = False
    root_volume_gi_b: Annotated[int, Field(ge=20, le=16384)] = 200
    # aws, cluster.autoscaler karpenter: the pool's NodePool settings
    karpenter: KarpenterPool | None = None
    # existing
    hosts: list[str] | None = None
    gpu_model: str | None = None
    gpus_per_node: Annotated[int, Field(ge=1, le=16)] | None = None
    cpus_per_node: Annotated[int, Field(ge=1)] | None = None
    memory_gi_b_per_node: Annotated[int, Field(ge=1)] | None = None
    # both
    min_size: Count | None = None
    desired_size: Count | None = None
    max_size: Count | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    sharing: Sharing = Sharing()
    oversubscribe: bool = False
    # Node label keys of the pool's network or NVLink domains (e.g. block, then rack), broadest first: the
    # pool gets a Kueue Topology and a topology queue. Default: the EKS network layers for EFA pools on aws.
    # `[]`: not topology-aware (served by the ordinary queue), e.g. an EFA pool that autoscales from zero.
    topology_labels: list[LabelKey] | None = Field(default=None, max_length=15)

    @field_validator("topology_labels")
    @classmethod
    def _distinct_levels(cls, labels: list[str] | None) -> list[str] | None:
        if labels is not None and len(set(labels)) != len(labels):
            raise ValueError(f"{labels}: each label may name one topology level only")
        return labels

    @field_validator("ami_family", mode="before")
    @classmethod
    def _refuse_al2(cls, value: Any) -> Any:
        if isinstance(value, str) and re.match(r"^AL2_", value):
            raise ValueError(f"{value!r}: {AL2_REFUSED}")
        return value

    @property
    def max_gpus(self) -> int:
        return (self.max_size or 0) * (self.gpus_per_node or 0)

    @property
    def min_gpus(self) -> int:
        return (self.min_size or 0) * (self.gpus_per_node or 0)


class TeamReclaim(Model):
    """A team's opt-in to idle reclaim (`invoke reclaim --apply`). `true` means every default, `false` off.

    A workload is warned once every GPU its pods hold has been below 5% utilisation for `after`, and only if it
    has been admitted for at least `minAge` (default twice `after`); a later run at least `grace` after the
    warning deactivates it only if it is still idle. Checkpoint writes, data staging and compilation keep GPU
    utilisation low, so `after` and `grace` together must cover the longest of those the team runs.
    """

    after: Duration | None = None  # idle this long before the warning (default: the team's idleAfter)
    grace: Duration = "1h"  # from the warning to the deactivation
    min_age: Duration | None = None  # admitted at least this long (default: twice `after`)
    # The team's members may keep a workload with `gpufleet.io/reclaim: never` (the platform's decision).
    allow_opt_out: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_bool(cls, value: Any) -> Any:
        return {} if value is True else value


class Team(Model):
    name: Name
    namespace: Name | None = None  # default: the team's name
    quotas: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)  # GPUs per pool name
    borrowing_limit: Count | None = None  # GPUs this team may borrow per pool (None: unlimited)
    lending_limit: Count | None = None  # GPUs of its quota this team lends per pool (None: all)
    priority: str = "default"  # default WorkloadPriorityClass for the team's jobs
    groups: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    # aws: the IAM roles (an IAM Identity Center permission set's role too) the team's members sign in with; each
    # becomes an EKS access entry in the team's `groups`, so the namespace's RoleBindings apply to them.
    role_arns: list[str] = Field(default_factory=list)
    weight: Annotated[float, Field(gt=0, le=1000)] = 1.0  # fair-sharing weight
    idle_after: Duration | None = None  # GPU idle alert/reclaim threshold (default: monitoring.idleAfter)
    pending_after: Duration | None = None  # queue wait alert threshold (default: monitoring.pendingAfter)
    reclaim_idle: TeamReclaim | None = None  # opt in to idle reclaim (`true` or `{after, grace, minAge}`)
    # The team may create LoadBalancer/NodePort Services (reachable from outside the cluster); off by default.
    allow_external_services: bool = False
    # CPU-only work (the team's `cpu` queue): cores and GiB, apart from the cores that come with its GPUs.
    cpu_quota: Annotated[int, Field(ge=0)] = 32
    memory_quota_gib: Annotated[int, Field(ge=0, alias="memoryQuotaGiB")] = 128

    @field_validator("reclaim_idle", mode="before")
    @classmethod
    def _reclaim_off(cls, value: Any) -> Any:
        return None if value is False else value

    @model_validator(mode="after")
    def _default_namespace(self) -> Team:
        if self.namespace is None:
            object.__setattr__(self, "namespace", self.name)
        return self


class PriorityClass(Model):
    name: Name
    value: int
    description: str = ""


def _default_priorities() -> list[PriorityClass]:
    return [
        PriorityClass(
            name="production", value=1000, description="Guaranteed work; preempts lower priorities."
        ),
        PriorityClass(name="default", value=100, description="Normal jobs."),
        PriorityClass(name="preemptible", value=10, description="Opportunistic jobs on borrowed GPUs."),
    ]


class Placement(Model):
    """Where GPU pods land. MostAllocated packs GPU jobs, LeastAllocated spreads (kube-scheduler NodeResourcesFit
    scoring, weighted by `weights`); FragmentationAware deploys the fragmentation-aware scheduler extender and a
    secondary scheduler (MostAllocated) that calls it, and routes team GPU pods to that scheduler."""

    strategy: Literal["MostAllocated", "LeastAllocated", "FragmentationAware"] = "MostAllocated"
    weights: dict[str, Annotated[int, Field(ge=1, le=100)]] = Field(
        default_factory=lambda: {"nvidia.com/gpu": 10, "cpu": 1, "memory": 1}
    )
    # FragmentationAware only: the extender scores without deciding (the profile places every pod) and its
    # /metrics count how often FGD would have placed a pod elsewhere: a trial on the cluster's own workload.
    shadow: bool = False

    @model_validator(mode="after")
    def _shadow_needs_the_extender(self) -> Placement:
        if self.shadow and self.strategy != "FragmentationAware":
            raise ValueError(
                f"shadow: true runs the FragmentationAware extender without deciding; strategy is {self.strategy!r}"
            )
        return self


# Kueue's fair-sharing preemption strategies, in the orders its configuration accepts (v0.19.2
# pkg/config/validation.go `validStrategySets`): rule S2-a (a borrower may evict down to its own final share,
# ties included), rule S2-b (only a share above the preemptor's), or S2-a then S2-b, Kueue's default.
FairSharingStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
FAIR_SHARING_STRATEGY_SETS: tuple[tuple[FairSharingStrategy, ...], ...] = (
    ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
    ("LessThanOrEqualToFinalShare",),
    ("LessThanInitialShare",),
)


class Scheduling(Model):
    cohort: Name = "gpufleet"
    placement: Placement = Placement()
    priority_classes: list[PriorityClass] = Field(default_factory=_default_priorities)
    # Borrowed workloads below this priority may be preempted by a borrower of higher priority.
    borrow_within_cohort_max_priority: int = 100
    fair_sharing: bool = True
    # How a borrower may evict another under fair sharing (Kueue's `fairSharing.preemptionStrategies`).
    fair_sharing_preemption_strategies: list[FairSharingStrategy] = Field(
        default_factory=lambda: list(FAIR_SHARING_STRATEGY_SETS[0])
    )
    # Must exceed GPU node provisioning (cold GPU nodes take 10-15 minutes) so gangs are not requeued early.
    wait_for_pods_ready_timeout: Annotated[str, Field(pattern=r"^\d+(s|m|h)$")] = "30m"
    # Admission waits for the cluster-autoscaler to provision a job's nodes (Kueue's ProvisioningRequest check):
    # true on every autoscaled GPU pool, or a list of the pools whose jobs wait (gangs that must start whole),
    # since the autoscaler answers one request per loop and every checked admission waits for it.
    provisioning_requests: bool | list[Name] = False

    def provisions(self, pool: str) -> bool:
        """Whether jobs on ``pool`` wait for a ProvisioningRequest (the pool must also be autoscaled)."""
        checked = self.provisioning_requests
        return checked is True or (isinstance(checked, list) and pool in checked)

    # Namespaces whose pods may reach team pods besides Prometheus's (cluster.monitoring.namespace, always
    # allowed while monitoring is enabled): the ingress controller's by default.
    platform_namespaces: list[Name] = Field(default_factory=lambda: ["ingress"])
    # Where the KubeRay operator runs: it polls each Ray head's dashboard (port 8265) for the RayJob's status
    # and is let through to it (docs.ray.io "KubeRay Operator Installation": a dedicated ray-system namespace).
    kuberay_namespace: Name = "ray-system"
    # Node labels of the nodes CPU-only work runs on (the `cpu-only` flavor); unset: any untainted node.
    cpu_node_labels: dict[str, str] = Field(default_factory=dict)
    # Kubernetes PriorityClasses team pods may name (a cluster's globalDefault class, which the API server writes
    # into every pod that names none, must be listed); none by default.
    pod_priority_classes: list[Name] = Field(default_factory=list)
    # The longest terminationGracePeriodSeconds of a team GPU pod: how long a stopped or preempted pod may keep
    # its GPUs.
    max_termination_grace_period: Annotated[str, Field(pattern=r"^\d+(s|m|h)$")] = "5m"

    @field_validator("fair_sharing_preemption_strategies")
    @classmethod
    def _strategy_set(cls, value: list[str]) -> list[str]:
        if tuple(value) not in FAIR_SHARING_STRATEGY_SETS:
            accepted = "; ".join(f"[{', '.join(s)}]" for s in FAIR_SHARING_STRATEGY_SETS)
            raise ValueError(f"[{', '.join(value)}] is not an order Kueue accepts; accepted: {accepted}")
        return value


# A host name as Slurm's NodeName, SlurmctldHost and AccountingStorageHost take it (no commas: hostlists).
HOST_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$"
HostName = Annotated[str, Field(pattern=HOST_NAME, max_length=253)]
# A Kubernetes node name: a lowercase RFC 1123 DNS subdomain (kubernetes/kubernetes@v1.35.8
# pkg/apis/core/validation/validation.go, ValidateNodeName = NameIsDNSSubdomain).
NODE_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A Slurm time limit as slurm.conf(5) MaxTime takes it: minutes, [days-]hours:minutes:seconds, or UNLIMITED.
SLURM_TIME = r"^(UNLIMITED|INFINITE|\d+|(\d+-)?\d+(:\d{2}){1,2}|\d+-\d+)$"
SlurmTime = Annotated[str, Field(pattern=SLURM_TIME)]


# slurm.conf(5) PrivateData's values (Slurm 21.08 to 24.11), and what gpufleet keeps private by default.
SlurmPrivateData = Literal[
    "accounts", "events", "jobs", "nodes", "partitions", "reservations", "usage", "users"
]
DEFAULT_PRIVATE_DATA: tuple[SlurmPrivateData, ...] = ("jobs", "usage")


class SlurmPartition(Model):
    """Options of the partition a pool becomes that the pool itself does not say (slurm.conf(5) PartitionName)."""

    max_time: SlurmTime = "UNLIMITED"  # MaxTime: the longest a job in this partition may run
    default: bool = False  # Default=YES: jobs that name no partition run here
    # DefaultTime: the time limit of a job that names none (unset: MaxTime); backfill plans with it
    default_time: SlurmTime | None = None


class Slurm(Model):
    """`cluster.orchestrator: slurm`: only what Slurm needs beyond the spec. Pools are partitions (their hosts the
    partition's nodes), teams are accounts; the controller and the accounting database are hosts of their own."""

    controller_hosts: Annotated[
        list[HostName], Field(min_length=1, max_length=2)
    ]  # slurmctld: primary, backup
    accounting_host: HostName  # slurmdbd (with its MariaDB)
    partitions: dict[str, SlurmPartition] = Field(default_factory=dict)  # by pool name
    # The Slurm release the hosts run (major.minor): the configuration adapts to it, and the roles check it.
    # 21.08 Ubuntu 22.04, 22.05 Debian 12 and EPEL 9, 23.11 Ubuntu 24.04, 24.11 SchedMD's packages.
    version: Literal["21.08", "22.05", "23.11", "24.11"] = "22.05"
    # Seconds a preempted borrowed job has between SIGTERM and SIGKILL (the borrow QOS's GraceTime); Slurm
    # honours it for requeued jobs from 23.11 on. 0: slurm.conf's KillWait (default 30 s).
    preempt_grace_seconds: Annotated[int, Field(ge=0, le=86400)] = 0
    # A node's RealMemory is its pool's memoryGiBPerNode less this share: hosts report less memory than their
    # nominal size (kernel, firmware), and slurmctld drains a node that reports less than RealMemory.
    memory_margin_percent: Annotated[int, Field(ge=0, le=50)] = 5
    # slurm.conf PrivateData: what a user sees only of their own; [] shows every team everything
    private_data: list[SlurmPrivateData] = Field(default_factory=lambda: list(DEFAULT_PRIVATE_DATA))
    # Seconds between runs of gpufleet-healthcheck, which drains a node whose GPUs are missing or faulty
    # (slurm.conf HealthCheckInterval, at most 65535); 0: no health check. slurmd gives it up to 60 s a run.
    health_check_interval: Annotated[int, Field(ge=0, le=65535)] = 300
    # slurmctld's state; with a backup controller required, on storage both controllers mount
    state_save_location: Annotated[str, Field(pattern=r"^/[^\s,]*$")] | None = None


class AwsRole(BaseModel):
    """One entry of the AWS provider's `aws:assumeRoles` chain, applied in order (pulumi-aws provider
    configuration, `assumeRoles`). Only what preflight needs to take the same identity is typed; the
    provider's other fields (duration, policy, tags, ...) pass through untouched."""

    model_config = ConfigDict(extra="allow", frozen=True, alias_generator=to_camel, populate_by_name=True)

    role_arn: str
    external_id: str | None = None
    session_name: str | None = None


class ClusterSpec(Model):
    """The whole validated stack: what `load_stack` returns and every part consumes."""

    stack: str
    platform: Literal["aws", "existing"]
    region: str | None = None
    # The AWS provider's own credentials settings (`aws:profile`, `aws:assumeRoles`): preflight and the
    # deploy's credential check use the same identity the program deploys with.
    aws_profile: str | None = None
    aws_assume_roles: tuple[AwsRole, ...] = ()
    cluster: Cluster
    system_pool: SystemPool = SystemPool()
    node_pools: list[NodePool]
    teams: list[Team] = Field(default_factory=list)
    versions: Versions = Versions()
    scheduling: Scheduling = Scheduling()
    slurm: Slurm | None = None  # `gpufleet:slurm`, with cluster.orchestrator: slurm

    def pool(self, name: str) -> NodePool:
        return next(p for p in self.node_pools if p.name == name)

    @property
    def availability_zones(self) -> list[str]:
        if self.cluster.availability_zones:
            return list(self.cluster.availability_zones)
        return [f"{self.region}{s}" for s in "abc"]
