"""The Slurm spec rules: what Slurm cannot express (or gpufleet does not carry over yet), refused up front with
the key path."""

from __future__ import annotations

from collections import Counter

from infra.slurm.site import uses_slurm
from infra.spec import ClusterSpec, Monitoring
from scheduler.slurm.policy import borrow_qos, slurm_version

# Slurm's own account (every association tree's top, sacctmgr(1)): a team may not take its name.
RESERVED_ACCOUNTS = ("root",)
# slurmd kills HealthCheckProgram after 60 s (slurm.conf(5) HealthCheckProgram): a shorter interval would start
# the next run while the last may still be running.
HEALTH_CHECK_MIN_INTERVAL = 60


def slurm_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """What Slurm cannot express (or gpufleet does not carry over yet), refused up front with the key path."""
    at = "gpufleet:cluster.orchestrator"
    if not uses_slurm(spec):
        if spec.slurm is not None:
            problems.append("gpufleet:slurm: only with gpufleet:cluster.orchestrator: slurm")
        return
    if spec.platform != "existing":
        problems.append(f"{at}: slurm runs on the hosts of platform existing only; on aws use kubernetes")
        return
    if spec.slurm is None:
        problems.append("gpufleet:slurm: required with orchestrator slurm (controllerHosts, accountingHost)")
        return
    _controller_problems(spec, problems)
    _version_problems(spec, problems)
    names = [p.name for p in spec.node_pools]
    for name in spec.slurm.partitions:
        if name not in names:
            problems.append(
                f"gpufleet:slurm.partitions.{name}: no pool named {name!r} (pools: {', '.join(names)})"
            )
    if 0 < spec.slurm.health_check_interval < HEALTH_CHECK_MIN_INTERVAL:
        problems.append(
            f"gpufleet:slurm.healthCheckInterval: 0 (off) or at least {HEALTH_CHECK_MIN_INTERVAL} seconds, the "
            f"time slurmd gives the health check to run; got {spec.slurm.health_check_interval}"
        )
    if sum(o.default for o in spec.slurm.partitions.values()) > 1:
        problems.append("gpufleet:slurm.partitions: at most one partition may be the default")
    models = Counter(p.gpu_model for p in spec.node_pools if p.sharing.mode == "exclusive")
    shared = [i for i, p in enumerate(spec.node_pools) if p.sharing.mode == "timeSlicing"]
    for i, pool in enumerate(spec.node_pools):
        where = f"gpufleet:nodePools[{i}]"
        if pool.sharing.mode == "exclusive" and models[pool.gpu_model] > 1:
            problems.append(
                f"{where}.gpuModel: another whole-GPU pool has {pool.gpu_model}; Slurm limits GPUs by GRES type "
                "(the GPU model), so two pools of one model cannot have quotas of their own: merge them"
            )
        if pool.topology_labels:
            problems.append(f"{where}.topologyLabels: not carried over to Slurm (topology.conf); remove them")
        if pool.taints:
            problems.append(f"{where}.taints: Kubernetes taints have no Slurm meaning; remove them")
        for key, value in (
            ("cpusPerNode", pool.cpus_per_node),
            ("memoryGiBPerNode", pool.memory_gi_b_per_node),
        ):
            if value is None:
                problems.append(
                    f"{where}.{key}: required on a Slurm stack: a node's CPUs and RealMemory in slurm.conf, and "
                    "its jobs' default memory and cores per GPU, come from it"
                )
    for i in shared[1:]:
        problems.append(
            f"gpufleet:nodePools[{i}].sharing: Slurm's shard GRES has no type, so only one time-sliced pool "
            "can have per-team limits of its own"
        )
    for i, team in enumerate(spec.teams):
        where = f"gpufleet:teams[{i}]"
        if team.name in RESERVED_ACCOUNTS:
            problems.append(f"{where}.name: {team.name!r} is Slurm's own root account; choose another name")
        if team.lending_limit is not None:
            problems.append(
                f"{where}.lendingLimit: Slurm has no lending limit (every idle GPU is open to a borrow QOS, "
                "requeued when the owner needs it); remove it"
            )
        if any(borrow_qos(team.name) == t.name for t in spec.teams):
            problems.append(f"{where}.name: clashes with the borrow QOS of team {team.name!r}")
    borrow = {borrow_qos(t.name) for t in spec.teams}
    for i, pc in enumerate(spec.scheduling.priority_classes):
        where = f"gpufleet:scheduling.priorityClasses[{i}]"
        if pc.value < 0:
            problems.append(
                f"{where}.value: Slurm's QOS Priority is 0 or more (a priority class is a QOS); got {pc.value}"
            )
        if pc.name in borrow:
            problems.append(f"{where}.name: {pc.name!r} is a team's borrow QOS; choose another name")
    _kubernetes_only(spec, problems)
    if spec.scheduling.placement.strategy == "FragmentationAware":
        problems.append(
            "gpufleet:scheduling.placement.strategy: FragmentationAware is a Kubernetes scheduler extender; "
            "Slurm places with select/cons_tres"
        )


def _controller_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """A backup controller takes over from the primary's saved state, so both must reach one StateSaveLocation
    (slurm.conf(5) StateSaveLocation: "must be readable and writable from both the primary and backup
    controllers"); without a shared one the backup starts from empty state and the running jobs are lost."""
    s = spec.slurm
    assert s is not None
    if len(s.controller_hosts) > 1 and s.state_save_location is None:
        problems.append(
            "gpufleet:slurm.controllerHosts: a backup controller needs gpufleet:slurm.stateSaveLocation, a folder "
            "on storage both controllers mount (slurm.conf StateSaveLocation); name it or keep one controller"
        )
    if len(set(s.controller_hosts)) != len(s.controller_hosts):
        problems.append("gpufleet:slurm.controllerHosts: the primary and the backup must be different hosts")


def _version_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """What the hosts' Slurm release cannot do. 21.08 (Ubuntu 22.04) has no `shard` GRES (gres.html "Sharding",
    new in 22.05) and neither gres.conf MultipleFiles (new in 22.05: gres.conf(5) at slurm-22-05-8-1, absent
    at slurm-21-08-5-1) nor an NVML plugin package on Ubuntu 22.04, so a MIG instance cannot be bound to its
    device files. GraceTime is honoured for preemption by requeue only from 23.11 (preempt.html at
    slurm-22-05-8-1: "only honored if PreemptMode=CANCEL"; the restriction is gone at slurm-23-11-4-1)."""
    s = spec.slurm
    assert s is not None
    version = slurm_version(s.version)
    if version < (22, 5):
        for i, pool in enumerate(spec.node_pools):
            if pool.sharing.mode == "timeSlicing":
                problems.append(
                    f"gpufleet:nodePools[{i}].sharing: time-slicing is Slurm's shard GRES, new in 22.05; "
                    f"gpufleet:slurm.version {s.version} has none"
                )
            if pool.sharing.mode == "mig":
                problems.append(
                    f"gpufleet:nodePools[{i}].sharing: a MIG instance is bound to its device files by NVML or "
                    f"gres.conf MultipleFiles (22.05 and later); gpufleet:slurm.version {s.version} has neither"
                )
    if s.preempt_grace_seconds and version < (23, 11):
        problems.append(
            f"gpufleet:slurm.preemptGraceSeconds: Slurm {s.version} honours GraceTime only for cancelled jobs, "
            "not requeued ones (from 23.11 on); remove it, or have jobs ask for a signal (sbatch --signal)"
        )


# Settings only the Kubernetes side reads, refused on a Slurm stack when given (a setting the stack cannot honour
# is refused, not ignored): key -> what it is for.
_CLUSTER_ONLY = {
    "kubeconfig": "the Kubernetes cluster's kubeconfig",
    "kubeconfig_context": "the Kubernetes cluster's kubeconfig context",
    "addons": "the GPU operator and Kueue of a Kubernetes cluster",
}
_TEAM_ONLY = {
    "namespace": "the team's Kubernetes namespace",
    "reclaim_idle": "idle reclaim deactivates Kueue workloads",
    "idle_after": "the idle-GPU alert reads Prometheus",
    "pending_after": "the queue-wait alert reads Prometheus",
    "cpu_quota": "the CPU-only Kueue queue",
    "memory_quota_gib": "the CPU-only Kueue queue",
    "allow_external_services": "Kubernetes Services",
}
_SCHEDULING_ONLY = {
    "cohort": "the Kueue cohort",
    "borrow_within_cohort_max_priority": "Kueue's preemption while borrowing",
    "fair_sharing_preemption_strategies": "Kueue's fair-sharing preemption",
    "wait_for_pods_ready_timeout": "Kueue's wait for pods",
    "provisioning_requests": "the cluster autoscaler's ProvisioningRequests",
    "platform_namespaces": "Kubernetes network policies",
    "kuberay_namespace": "Kubernetes network policies",
    "cpu_node_labels": "the CPU-only Kueue flavor",
    "pod_priority_classes": "Kubernetes PriorityClasses of team pods",
    "max_termination_grace_period": "the termination grace of team pods",
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest).replace("Gib", "GiB")


def _kubernetes_only(spec: ClusterSpec, problems: list[str]) -> None:
    """What only Kubernetes reads, refused with its key path on a Slurm stack (docs/slurm.md lists it)."""
    refuse = "is a Kubernetes setting ({}); Slurm does not use it: remove it"
    cluster = spec.cluster
    if cluster.monitoring != Monitoring():
        problems.append(
            "gpufleet:cluster.monitoring: "
            + refuse.format("Prometheus, alerts and dashboards; a Slurm stack's usage comes from sacct")
        )
    if cluster.driver_managed_by == "operator":
        problems.append("gpufleet:cluster.driverManagedBy: operator " + refuse.format("the GPU operator"))
    for field, what in _CLUSTER_ONLY.items():
        if field in cluster.model_fields_set:
            problems.append(f"gpufleet:cluster.{_camel(field)}: " + refuse.format(what))
    for i, pool in enumerate(spec.node_pools):
        if pool.labels:
            problems.append(f"gpufleet:nodePools[{i}].labels: " + refuse.format("Kubernetes node labels"))
    for i, team in enumerate(spec.teams):
        for field, what in _TEAM_ONLY.items():
            if field in team.model_fields_set:
                problems.append(f"gpufleet:teams[{i}].{_camel(field)}: " + refuse.format(what))
    for field, what in _SCHEDULING_ONLY.items():
        if field in spec.scheduling.model_fields_set:
            problems.append(f"gpufleet:scheduling.{_camel(field)}: " + refuse.format(what))
    if "weights" in spec.scheduling.placement.model_fields_set:
        problems.append(
            "gpufleet:scheduling.placement.weights: "
            + refuse.format("kube-scheduler's scoring; Slurm places with select/cons_tres")
        )
