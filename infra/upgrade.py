"""The cluster side of an upgrade: `invoke preview`'s rollout with the running workloads read from the cluster,
and `invoke drain`, which holds the pools' ClusterQueues, waits for their running jobs within a bound, and
releases them after the rollout. The decisions are pure (`infra.rollout`, `infra.drain`); this module reads
and patches through kubectl (`infra.monitoring.workloads.StackKubectl`) and nothing else.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from typing import Any

from infra.drain import HOLD_PATCH, RELEASE_PATCH, DrainPlan, plan_drain
from infra.errors import CheckFailed, ConfigError, GpufleetError
from infra.monitoring.workloads import Run, StackKubectl
from infra.rollout import Facts, Rollout, disruption_problem, plan_rollout, rollout_facts, running_by_pool
from infra.spec import ClusterSpec

CQ = "clusterqueues.kueue.x-k8s.io"
WORKLOADS = "workloads.kueue.x-k8s.io"
HELD_BY = "gpufleet.io/held-for-drain"  # on a ClusterQueue this command stopped: the pools, comma-separated
Kubectl = Callable[..., dict[str, Any] | None]


def _list(kubectl: Kubectl, what: str) -> list[dict[str, Any]]:
    return list((kubectl(f"get {what} -o json") or {}).get("items", []))


def cluster_workloads(spec: ClusterSpec, run: Run) -> list[dict[str, Any]] | None:
    """Every Kueue Workload of the stack's cluster, or None when the cluster cannot be reached."""
    kubectl = StackKubectl(spec, run)
    try:
        kubectl.check()
        return _list(kubectl, f"{WORKLOADS} -A")
    except GpufleetError:
        return None


def preview_rollout(spec: ClusterSpec, deployed: Facts, run: Run) -> Rollout:
    """What the stack rolls against its deployed facts; running workloads from the cluster where it answers."""
    workloads = cluster_workloads(spec, run)
    running = None if workloads is None else running_by_pool(workloads)
    return plan_rollout(deployed, rollout_facts(spec), running)


def refuse_evictions(spec: ClusterSpec, deployed: Facts, run: Run) -> None:
    """`invoke deploy`'s gate: a CheckFailed (exit 1) when the rollout would evict running work."""
    if problem := disruption_problem(preview_rollout(spec, deployed, run)):
        raise CheckFailed(problem)


def _pools(spec: ClusterSpec, pools: list[str]) -> list[str]:
    names = [p.name for p in spec.node_pools]
    unknown = [p for p in pools if p not in names]
    if not pools or unknown:
        raise ConfigError(
            f"--pools {','.join(pools)!r}: {'no pool given' if not pools else f'no pool named {unknown[0]!r}'}; "
            f"accepted: a comma-separated list of {', '.join(names)}"
        )
    return pools


def hold(kubectl: Kubectl, spec: ClusterSpec, pools: list[str]) -> DrainPlan:
    """Stop the pools' ClusterQueues (`stopPolicy: Hold`), marked as held for these pools; the plan as it was."""
    plan = plan_drain(_pools(spec, pools), _list(kubectl, CQ), _list(kubectl, f"{WORKLOADS} -A"))
    patch = {**HOLD_PATCH, "metadata": {"annotations": {HELD_BY: ",".join(plan.pools)}}}
    for queue in plan.hold:
        kubectl(f"patch {CQ} {shlex.quote(queue)} --type merge -p {shlex.quote(json.dumps(patch))} -o json")
    return plan


def wait_for_jobs(
    kubectl: Kubectl,
    pools: list[str],
    bound_s: float,
    say: Callable[[str], None],
    *,
    poll_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Wait until no admitted workload holds quota on `pools`, at most `bound_s`; the ones still running."""
    deadline = clock() + bound_s
    last: list[str] | None = None
    while True:
        running = plan_drain(pools, [], _list(kubectl, f"{WORKLOADS} -A")).running
        if list(running) != last:
            say(f"running on {','.join(pools)}: {', '.join(running) or 'none'}")
            last = list(running)
        if not running or clock() >= deadline:
            return list(running)
        pause(min(poll_s, max(deadline - clock(), 0.0)))


def release(kubectl: Kubectl) -> list[str]:
    """Resume every ClusterQueue this command held (and only those); their names."""
    released = []
    for cq in _list(kubectl, CQ):
        if HELD_BY not in cq.get("metadata", {}).get("annotations", {}):
            continue
        patch = {**RELEASE_PATCH, "metadata": {"annotations": {HELD_BY: None}}}
        name = cq["metadata"]["name"]
        kubectl(f"patch {CQ} {shlex.quote(name)} --type merge -p {shlex.quote(json.dumps(patch))} -o json")
        released.append(name)
    return released


def drain(
    spec: ClusterSpec, pools: list[str], bound_s: float, run: Run, say: Callable[[str], None] = print
) -> DrainPlan:
    """Hold, then wait within the bound; a CheckFailed (exit 1) naming what still runs when the bound passes.
    Nothing is evicted either way, and the queues stay held until `release`."""
    kubectl = StackKubectl(spec, run)
    kubectl.check()
    plan = hold(kubectl, spec, pools)
    say(f"held (stopPolicy: Hold): {', '.join(plan.hold) or 'no ClusterQueue'}")
    left = wait_for_jobs(kubectl, list(plan.pools), bound_s, say)
    if left:
        raise CheckFailed(
            f"{len(left)} workload(s) still run on {','.join(plan.pools)} after {bound_s:g} s: {', '.join(left)}; "
            "nothing was evicted and the queues stay held: let them checkpoint and finish, then run drain "
            "again (or `invoke drain --release` to resume admission without rolling)"
        )
    say(f"no job runs on {','.join(plan.pools)}: roll them now (invoke deploy), then invoke drain --release")
    return plan
