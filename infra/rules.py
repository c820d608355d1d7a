"""Cross-field rules of the cluster spec, checked once, up front, before anything else runs.

`check_spec` returns the spec with facts resolved from the catalog (GPU model and GPUs per node of AWS pools,
sizes of host groups, per-minor version pins), so consumers never look them up again. Every problem names its
key path and what is accepted; all problems are reported at once.

This module composes the rules and holds those common to every platform and pool; each domain keeps its own
(`infra.aws.rules`, `infra.existing.rules`, `infra.monitoring.rules`, `infra.aws.karpenter.rules`,
`infra.slurm.rules.slurm_problems`, and the scheduler compiler's input checks, `scheduler.checks`).
"""

from __future__ import annotations

from infra import catalog
from infra.aws.karpenter.rules import karpenter_problems
from infra.aws.rules import aws_cluster_problems, aws_pool, aws_problems, aws_regions
from infra.aws.team_access import team_access_problems
from infra.errors import ConfigError
from infra.existing.rules import existing_cluster_problems, existing_pool, host_problems
from infra.monitoring.rules import monitoring_problems
from infra.pools import karpenter_managed
from infra.problems import NP, TEAMS, check_sizes, duplicates
from infra.scheduling import (
    ACCELERATOR_LABEL,
    GPU_MODEL_LABEL,
    GPU_PRESENT_LABEL,
    scheduler_inputs,
    topology_levels,
)
from infra.shares import share_problems
from infra.slurm.rules import slurm_problems
from infra.spec import ClusterSpec, NodePool
from infra.versions import EKS_KUBERNETES, KUEUE_VERSION, SUPPORTED_KUBERNETES
from scheduler.checks import check
from scheduler.errors import SchedulerConfigError
from scheduler.labels import DEVICE_PLUGIN_CONFIG_LABEL, GPU_TAINT_KEY, MIG_CONFIG_LABEL, POOL_LABEL

RESERVED_LABELS = (
    POOL_LABEL,
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    GPU_PRESENT_LABEL,
    ACCELERATOR_LABEL,
    GPU_MODEL_LABEL,
)
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."  # the GPU operator's per-node operand switches


def _pool_common(i: int, pool: NodePool, problems: list[str]) -> None:
    at = f"{NP}[{i}]"
    if pool.max_size is not None:
        check_sizes(at, pool.min_size, pool.desired_size, pool.max_size, problems)
    for key in pool.labels:
        if key in RESERVED_LABELS or key.startswith(DEPLOY_LABEL_PREFIX):
            problems.append(f"{at}.labels.{key}: set by gpufleet; remove it")
    for j, taint in enumerate(pool.taints):
        if taint.key == GPU_TAINT_KEY:
            problems.append(f"{at}.taints[{j}].key: {GPU_TAINT_KEY} is always set by gpufleet; remove it")
    model = catalog.GPU_MODELS.get(pool.gpu_model or "")
    if pool.sharing.mig and model is not None:
        profiles = [p for p, _ in model.mig_profiles]
        if not profiles:
            capable = [m.name for m in catalog.GPU_MODELS.values() if m.mig_profiles]
            problems.append(
                f"{at}.sharing.mig: {model.name} does not support MIG; MIG-capable: {', '.join(capable)}"
            )
        elif pool.sharing.mig not in profiles:
            problems.append(
                f"{at}.sharing.mig: {pool.sharing.mig!r} is not a {model.name} MIG profile; "
                f"accepted: {', '.join(profiles)}"
            )


def _lending(spec: ClusterSpec, problems: list[str]) -> None:
    for i, team in enumerate(spec.teams):
        quota_max = max(team.quotas.values(), default=0)
        if team.lending_limit is not None and team.lending_limit > quota_max:
            problems.append(
                f"{TEAMS}[{i}].lendingLimit: {team.lending_limit} exceeds the team's largest quota ({quota_max})"
            )


def _addons(spec: ClusterSpec, problems: list[str]) -> None:
    """`addons` chooses between installing and adopting on a cluster gpufleet did not create."""
    addons, at = spec.cluster.addons, "gpufleet:cluster.addons"
    adopted = [
        key
        for key, value in (("gpuOperator", addons.gpu_operator), ("kueue", addons.kueue))
        if value != "install"
    ]
    if spec.platform == "aws" and adopted:
        problems.append(
            f"{at}.{adopted[0]}: existing is for platform existing; on aws gpufleet installs the add-ons on the "
            "cluster it creates (accepted here: install)"
        )
    if addons.gpu_operator == "existing" and spec.cluster.driver_managed_by == "operator":
        problems.append(
            f"{at}.gpuOperator: existing leaves the GPU operator's configuration to whoever installed it, so "
            "gpufleet:cluster.driverManagedBy: operator cannot be honoured; use host, or gpuOperator: install"
        )


def _kueue_release(spec: ClusterSpec, problems: list[str]) -> None:
    """Kueue other than the release the compiler and the twin are proven against, only when asked for."""
    versions = spec.versions
    if versions.kueue_chart != KUEUE_VERSION and not versions.kueue_chart_override:
        problems.append(
            f"gpufleet:versions.kueueChart: {versions.kueue_chart!r} is not the Kueue release gpufleet compiles "
            f"for and tests ({KUEUE_VERSION}); accepted: {KUEUE_VERSION}, or set "
            "gpufleet:versions.kueueChartOverride: true to deploy an untested release"
        )


def _topology_from_zero(spec: ClusterSpec, problems: list[str]) -> None:
    """A topology-aware pool must have nodes to place on, or a way to get them before placement.

    Kueue's topology-aware scheduling assigns a workload to topology domains of the nodes that exist; it waits
    for nodes only when the flavor carries a ProvisioningRequest admission check (kueue v0.19.2
    pkg/scheduler/flavorassigner/tas_flavorassigner.go; site/.../concepts/topology_aware_scheduling.md: "TAS
    integrates with the ClusterAutoscaler through the Provisioning AdmissionCheck"). With no node the workload
    is never admitted, no pod is ever created, and so nothing scales the pool up: a deadlock."""
    for i, pool in enumerate(spec.node_pools):
        if spec.platform != "aws" or not topology_levels(spec, pool):
            continue
        at = f"{NP}[{i}]"
        if karpenter_managed(spec, pool):
            problems.append(
                f"{at}.topologyLabels: a Karpenter pool cannot be topology-aware: Kueue places topology gangs only "
                "on nodes that exist and Karpenter does not implement the ProvisioningRequest check that would "
                "let them wait; remove topologyLabels (its pods then go through the ordinary queue)"
            )
        elif (pool.min_size or 0) == 0 and not spec.scheduling.provisions(pool.name):
            problems.append(
                f"{at}: topology-aware (its EFA pods are placed by network domain) with minSize 0, but Kueue "
                "places a topology gang only on nodes that already exist, so a pool at 0 nodes never starts "
                "one; set gpufleet:scheduling.provisioningRequests: true or list the pool there (the "
                "autoscaler provisions the gang's nodes first), or minSize to the nodes a gang needs, or "
                "topologyLabels: [] to opt out"
            )


def resolved_problems(spec: ClusterSpec) -> list[str]:
    """Rules that read a spec whose catalog facts are resolved; also run by `infra.program.build`."""
    problems: list[str] = []
    _lending(spec, problems)
    monitoring_problems(spec, problems)
    if spec.platform == "aws":
        aws_problems(spec, problems)
    _topology_from_zero(spec, problems)
    share_problems(spec, problems)
    karpenter_problems(spec, problems)
    _scheduling(spec, problems)
    slurm_problems(spec, problems)
    return problems


def _scheduling(spec: ClusterSpec, problems: list[str]) -> None:
    """Team and scheduling rules are the scheduler compiler's own input checks, run here so they fail up front."""
    try:
        check(*scheduler_inputs(spec))
    except SchedulerConfigError as exc:
        problems.extend(exc.problems)


def check_spec(spec: ClusterSpec) -> ClusterSpec:
    """Apply the cross-field rules; return the spec with catalog facts resolved, or raise ConfigError."""
    problems: list[str] = []
    at = "gpufleet:cluster"
    if spec.cluster.kubernetes_version not in SUPPORTED_KUBERNETES:
        problems.append(
            f"{at}.kubernetesVersion: {spec.cluster.kubernetes_version!r} is outside the supported range; "
            f"accepted: {', '.join(SUPPORTED_KUBERNETES)}"
        )
    ea = spec.cluster.endpoint_access
    if ea.public and not ea.public_cidrs:
        problems.append(f"{at}.endpointAccess.publicCidrs: a public endpoint needs a CIDR allow-list")
    if not ea.public and ea.public_cidrs:
        problems.append(
            f"{at}.endpointAccess.publicCidrs: set endpointAccess.public: true to use an allow-list"
        )
    if spec.platform == "aws":
        aws_cluster_problems(spec, problems)
    else:
        existing_cluster_problems(spec, problems)
        host_problems(spec, problems)
    _addons(spec, problems)
    team_access_problems(spec, problems)
    _kueue_release(spec, problems)
    pools = [
        aws_pool(i, p, spec, problems) if spec.platform == "aws" else existing_pool(i, p, problems)
        for i, p in enumerate(spec.node_pools)
    ]
    for dup in sorted(duplicates([p.name for p in pools])):
        problems.append(f"{NP}: duplicate pool name {dup!r}")
    for i, pool in enumerate(pools):
        _pool_common(i, pool, problems)
    if problems and not _resolvable(spec, pools):  # the rules below read the catalog's facts
        raise ConfigError(problems)
    spec = spec.model_copy(
        update={"node_pools": pools, "versions": spec.versions.resolved(spec.cluster.kubernetes_version)}
    )
    problems += resolved_problems(spec)
    if problems:  # every problem at once: those of both passes, each once
        raise ConfigError(list(dict.fromkeys(problems)))
    return spec


def _resolvable(spec: ClusterSpec, pools: list[NodePool]) -> bool:
    """Whether the facts the resolved rules read are there: the Kubernetes minor's pins (on aws, its EKS ones),
    the region and system pool type of an aws stack, pools of distinct names, and each pool's GPU model, GPUs per
    node, size and MIG profile. A problem elsewhere (a label, a size, a host, an add-on) does not keep them from running, so one
    run reports the mistakes of both passes."""
    if spec.cluster.kubernetes_version not in SUPPORTED_KUBERNETES or duplicates([p.name for p in pools]):
        return False
    if spec.platform == "aws":
        if spec.cluster.kubernetes_version not in EKS_KUBERNETES:  # its EKS pins are absent
            return False
        system = catalog.lookup(spec.system_pool.instance_type)
        regions = aws_regions()
        if not spec.region or (regions and spec.region not in regions) or system is None or system.gpus:
            return False
    for pool in pools:
        model = catalog.GPU_MODELS.get(pool.gpu_model or "")
        if model is None or pool.gpus_per_node is None or pool.max_size is None:
            return False
        if pool.sharing.mig and pool.sharing.mig not in dict(model.mig_profiles):
            return False
    return True
