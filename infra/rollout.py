"""What a change of a deployed stack rolls, and which running work it would disrupt: pure data for `invoke
preview`, from the stack as deployed and the stack as it is now.

The stack as deployed is summed up in *facts* (`rollout_facts`): the Kubernetes minor, the charts, and per
pool what replaces its nodes when it changes. The program exports them (output `rolloutFacts`), so a preview
compares the state with the stack file; a stack file given as deployed gives the same facts offline. What
replaces nodes, and why:
- an EKS managed node group rolls every node when its Kubernetes version, its AMI release or its launch
  template changes: EKS cordons and drains each node with the eviction API, one at a time (`max_unavailable:
  1`), and a training pod has no disruption budget, so it is evicted at once (EKS User Guide, "Managed node
  update behavior");
- a Karpenter NodePool drifts when its template, its EC2NodeClass (the AMI alias) or the cluster's minor
  changes (Karpenter v1.14.1, concepts/disruption.md "Drift"). A training pool whose `Drifted` budget is 0, or
  whose NodePool has no grace period, keeps busy nodes until their jobs end; an inference pool drains one
  node at a time; `drainBusyNodesOnDrift` deletes running pods when the grace period ends. An empty drifted
  node goes by drift where a budget allows it, else by consolidation after `consolidateAfter`: a pool with
  neither (a capacity block: `consolidateAfter: Never`, `Drifted: 0`) keeps its nodes on the old template
  (kubernetes-sigs/karpenter@v1.14.1 pkg/controllers/disruption/emptiness.go:42-50, drift.go:79-83; shown on
  the twin's real Karpenter, tests/twin/test_karpenter.py);
- an `existing` cluster's hosts are not rolled by gpufleet (Kubernetes is the cluster's own; drivers move
  with `invoke metal --reboot`).

EKS upgrades the control plane one minor at a time (EKS User Guide, "Update existing cluster to new Kubernetes
version"), so a step of more than one minor, or back, is refused before anything runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from infra.aws.karpenter.pools import node_class, node_pool, plan_pool
from infra.aws.nodepools import launch_template_fingerprint, launch_template_tags, plan_node_groups
from infra.errors import ConfigError
from infra.pools import SYSTEM_GROUP, karpenter_managed, managed_node_group_spec, workload
from infra.spec import ClusterSpec, NodePool

Facts = dict[str, Any]
NODE_GROUP, NODEPOOL, HOSTS = "node group", "NodePool", "hosts"
KEY = "gpufleet:cluster.kubernetesVersion"


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _drift_waits_for_jobs(pool: NodePool) -> bool:
    """A Karpenter training pool whose drift never deletes a running pod (infra.aws.karpenter.rules)."""
    settings = pool.karpenter
    if workload(pool) != "training":
        return False
    if settings is None or settings.budgets is None:
        return True  # the default training budgets allow no Drifted disruption
    return settings.termination_grace_period == "Never" or not settings.drain_busy_nodes_on_drift


def _drift_reaches_empty_nodes(spec: ClusterSpec, pool: NodePool) -> bool:
    """An empty drifted node of the pool is replaced: a budget lets drift take it, or consolidation does."""
    if plan_pool(spec, pool).consolidate_after != "Never":
        return True
    settings = pool.karpenter
    budgets = settings.budgets if settings and settings.budgets is not None else None
    if budgets is None:
        return workload(pool) != "training"  # the training defaults allow no Drifted disruption
    return any(
        (not b.reasons or "Drifted" in b.reasons) and b.nodes.rstrip("%") not in ("0", "") for b in budgets
    )


def _aws_pools(spec: ClusterSpec) -> dict[str, Facts]:
    groups = managed_node_group_spec(spec)
    out: dict[str, Facts] = {}
    for plan in plan_node_groups(groups):
        out[plan.pool] = {
            "kind": NODE_GROUP,
            "workload": "system" if plan.pool == SYSTEM_GROUP else "training",
            "release": plan.release_version,
            "template": launch_template_fingerprint(plan, launch_template_tags(groups, plan)),
        }
    for pool in spec.node_pools:
        if not karpenter_managed(spec, pool):
            continue
        nodeclass, nodepool = node_class(spec, pool), node_pool(spec, pool)
        out[pool.name] = {
            "kind": NODEPOOL,
            "workload": workload(pool),
            "release": nodeclass["spec"]["amiSelectorTerms"][0]["alias"],
            # What Karpenter compares for drift: the template and the node class, not the behaviour fields.
            "template": _digest([nodepool["spec"]["template"], nodeclass["spec"]]),
            "waitsForJobs": _drift_waits_for_jobs(pool),
            "emptyNodesRoll": _drift_reaches_empty_nodes(spec, pool),
        }
    return out


def rollout_facts(spec: ClusterSpec) -> Facts:
    """What a later change of this (checked) stack is compared against; plain JSON, exported by the program."""
    versions = spec.versions
    pools = (
        _aws_pools(spec)
        if spec.platform == "aws"
        else {p.name: {"kind": HOSTS, "workload": workload(p)} for p in spec.node_pools}
    )
    return {
        "platform": spec.platform,
        "kubernetesVersion": spec.cluster.kubernetes_version,
        "driverManagedBy": spec.cluster.driver_managed_by,
        # existing: the driver gpufleet has installed (the AMI carries it on aws)
        "driver": "" if spec.platform == "aws" else _driver(spec),
        "charts": {
            "gpu-operator": versions.gpu_operator_chart
            if spec.cluster.addons.gpu_operator == "install"
            else "",
            "kueue": versions.kueue_chart if spec.cluster.addons.kueue == "install" else "",
            "kube-prometheus-stack": (
                versions.kube_prometheus_stack_chart
                if spec.cluster.monitoring.prometheus == "install"
                else ""
            ),
        },
        "pools": pools,
    }


def _driver(spec: ClusterSpec) -> str:
    versions = spec.versions
    operator = spec.cluster.driver_managed_by == "operator"
    return versions.nvidia_driver_branch if operator else versions.nvidia_driver_version


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def minor_step_problem(deployed: str, wanted: str) -> str | None:
    """One line when `wanted` is not the deployed minor or the next one."""
    (a, b), (c, d) = _minor(deployed), _minor(wanted)
    if (c, d) < (a, b):
        return f"{KEY}: {wanted} is older than the deployed {deployed}; EKS cannot downgrade a cluster"
    if (c, d) > (a, b + 1):
        return (
            f"{KEY}: {deployed} -> {wanted} skips a minor; EKS upgrades one minor at a time: deploy "
            f"{a}.{b + 1} first, then {wanted}"
        )
    return None


@dataclass(frozen=True)
class PoolRoll:
    """One pool whose nodes would be replaced, why, and whether running work on it would be disrupted."""

    pool: str
    kind: str
    reasons: tuple[str, ...]
    how: str
    disrupts_running: bool
    workloads: tuple[str, ...] = ()  # namespace/name of the admitted workloads on it (from the cluster)


@dataclass(frozen=True)
class Rollout:
    steps: tuple[str, ...]  # in the order the deploy applies them
    rolls: tuple[PoolRoll, ...]
    notes: tuple[str, ...] = field(default=())
    workloads_read: bool = False

    def disrupting(self) -> list[PoolRoll]:
        return [r for r in self.rolls if r.disrupts_running]


def _reasons(before: Facts, after: Facts, minor: tuple[str, str]) -> list[str]:
    reasons = []
    if minor[0] != minor[1] and after["kind"] in (NODE_GROUP, NODEPOOL):
        reasons.append(f"Kubernetes {minor[0]} -> {minor[1]}")
    if before.get("release") != after.get("release"):
        reasons.append(f"AMI release {before.get('release')} -> {after.get('release')}")
    if before.get("template") != after.get("template"):
        reasons.append(
            "launch template content" if after["kind"] == NODE_GROUP else "NodePool or EC2NodeClass"
        )
    return reasons


def _how(after: Facts) -> tuple[str, bool]:
    if after["kind"] == NODE_GROUP:
        return "every node replaced, one at a time; EKS evicts its pods", after["workload"] != "system"
    if after.get("waitsForJobs") and not after.get("emptyNodesRoll", True):
        return (
            "drift: no node replaced, busy or empty (never consolidated, no Drifted budget): the nodes keep "
            "the old template until they are deleted",
            False,
        )
    if after.get("waitsForJobs"):
        return "drift: busy nodes kept until their jobs end, empty ones replaced", False
    if after["workload"] == "inference":
        return "drift: one node at a time, its pods rescheduled", True
    return "drift: busy nodes drained, running pods deleted when the grace period ends", True


def _chart_notes(before: Facts, after: Facts) -> list[str]:
    notes = []
    old, new = before["charts"], after["charts"]
    if old.get("gpu-operator") != new.get("gpu-operator") and new.get("gpu-operator"):
        note = (
            f"GPU operator {old.get('gpu-operator')} -> {new['gpu-operator']}: its CRDs are upgraded by the chart's "
            "hook; the device plugin, dcgm-exporter and mig-manager DaemonSets restart on every GPU node and "
            "running pods keep running"
        )
        if after["driverManagedBy"] == "operator":
            note += (
                "; the operator's driver upgrade waits on each node until its admitted jobs end, then reloads the "
                "driver (drain the pools so the nodes empty)"
            )
        notes.append(note)
    if old.get("kueue") != new.get("kueue") and new.get("kueue"):
        notes.append(
            f"Kueue {old.get('kueue')} -> {new['kueue']}: the controller restarts, admitted workloads keep "
            "running, job creation fails while its webhook restarts (seconds)"
        )
    if before.get("driver") != after.get("driver") and after.get("driver"):
        how = (
            "the GPU operator upgrades it node by node, each once its admitted jobs end"
            if after["driverManagedBy"] == "operator"
            else "`invoke metal --reboot` installs it host group by host group, draining each host"
        )
        notes.append(
            f"NVIDIA driver {before.get('driver')} -> {after['driver']}: {how}; drain the pools first"
        )
    kps = "kube-prometheus-stack"
    if old.get(kps) != new.get(kps) and new.get(kps):
        notes.append(f"{kps} {old.get(kps)} -> {new[kps]}: its CRDs are upgraded first by the chart's job")
    return notes


def plan_rollout(before: Facts, after: Facts, running: dict[str, list[str]] | None = None) -> Rollout:
    """The rollout from facts `before` (deployed) to `after` (the stack now); `running` maps a pool to the
    admitted workloads on it, read from the cluster (None: not read). A step of more than one minor is a
    ConfigError (exit 2)."""
    minor = (before["kubernetesVersion"], after["kubernetesVersion"])
    if after["platform"] == "aws" and (problem := minor_step_problem(*minor)):
        raise ConfigError(problem)
    rolls = []
    for name, now in after["pools"].items():
        was = before["pools"].get(name)
        if was is None:
            continue
        reasons = _reasons(was, now, minor)
        if reasons:
            how, disrupts = _how(now)
            on_pool = tuple((running or {}).get(name, ()))
            rolls.append(PoolRoll(name, now["kind"], tuple(reasons), how, disrupts, on_pool))
    for name, was in before["pools"].items():
        if name not in after["pools"] and was["kind"] != HOSTS:
            on_pool = tuple((running or {}).get(name, ()))
            rolls.append(
                PoolRoll(name, was["kind"], ("pool removed",), "its nodes are deleted", True, on_pool)
            )
    upgrade = minor[0] != minor[1] and after["platform"] == "aws"
    steps = [f"control plane {minor[0]} -> {minor[1]}"] if upgrade else []
    if rolls:
        steps.append("node groups and NodePools (below)" + (", after the control plane" if upgrade else ""))
    if upgrade:
        steps.append(
            "by hand, right after the deploy: vpc-cni, kube-proxy and CoreDNS to their versions for "
            f"{minor[1]} (gpufleet does not move them; docs/deploy.md, Upgrades)"
        )
    return Rollout(tuple(steps), tuple(rolls), tuple(_chart_notes(before, after)), running is not None)


def running_by_pool(workloads: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Admitted, unfinished Kueue Workloads by the pool (flavor, named after the pool) they hold quota on."""
    out: dict[str, list[str]] = {}
    for w in workloads:
        status = w.get("status", {})
        done = {c["type"] for c in status.get("conditions", []) if c.get("status") == "True"}
        if "Admitted" not in done or "Finished" in done:
            continue
        meta = w.get("metadata", {})
        who = f"{meta.get('namespace')}/{meta.get('name')}"
        flavors = {
            flavor
            for podset in status.get("admission", {}).get("podSetAssignments", [])
            for flavor in podset.get("flavors", {}).values()
        }
        for flavor in sorted(flavors):
            out.setdefault(flavor, []).append(who)
    return out


def rollout_lines(rollout: Rollout) -> list[str]:
    """The rollout as `invoke preview` prints it."""
    lines = [f"step {i}: {step}" for i, step in enumerate(rollout.steps, 1)]
    if not rollout.rolls:
        lines.append("no node group or NodePool rolls")
    for r in rollout.rolls:
        lines.append(f"rolls: {r.kind} {r.pool} ({', '.join(r.reasons)}): {r.how}")
        if not r.disrupts_running:
            continue
        if r.workloads:
            lines.append(f"  disrupts running: {', '.join(r.workloads)}")
        elif rollout.workloads_read:
            lines.append("  disrupts running: none now")
        else:
            lines.append(f"  disrupts running: every workload admitted to {r.pool} (cluster not read)")
    lines.extend(f"chart: {note}" for note in rollout.notes)
    if rollout.disrupting():
        pools = ",".join(r.pool for r in rollout.disrupting())
        lines.append(f"to let running jobs finish first: invoke drain --pools {pools}, then deploy")
    return lines


def disruption_problem(rollout: Rollout) -> str | None:
    """Why a deploy may not roll yet: a pool it rolls would evict running work, or the cluster could not be read
    to know. None when nothing disrupting rolls, or every such pool is empty (drained)."""
    disrupting = rollout.disrupting()
    if not disrupting:
        return None
    pools = ",".join(r.pool for r in disrupting)
    if not rollout.workloads_read:
        return (
            f"the deploy rolls {pools} and the cluster's workloads could not be read (KUBECONFIG) to know whether "
            f"jobs run there; run `invoke drain --pools {pools}` with the cluster reachable, or deploy with "
            "--roll-running to evict what runs"
        )
    running = [w for r in disrupting for w in r.workloads]
    if not running:
        return None
    return (
        f"the deploy rolls {pools} and would evict running work: {', '.join(running)}; run "
        f"`invoke drain --pools {pools}` first (it lets them finish), or deploy with --roll-running"
    )
