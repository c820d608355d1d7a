"""Bad input: SchedulerConfigError naming the exact key, every problem at once, and nothing rendered."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scheduler import SchedulerConfigError, compile, render
from scheduler.model import PoolView, SchedulingPolicy, TeamPolicy
from tests.scheduler.examples import METAL, METAL_POOLS, PROD, PROD_POOLS, pool


def _team(policy: SchedulingPolicy, index: int, **changes: object) -> SchedulingPolicy:
    teams = list(policy.teams)
    teams[index] = replace(teams[index], **changes)  # type: ignore[arg-type]
    return replace(policy, teams=tuple(teams))


def _error(policy: SchedulingPolicy, pools: tuple[PoolView, ...] = PROD_POOLS) -> str:
    with pytest.raises(SchedulerConfigError) as info:
        compile(policy, pools)
    assert info.value.exit_code == 2
    return str(info.value)


CASES = {
    "unknown pool": (
        _team(PROD, 2, quotas={"l40s-infer": 16, "h200": 8}),
        "gpufleet:teams[2].quotas.h200: unknown pool; accepted: h100-train, l40s-infer, a10g-batch, h100-mig",
    ),
    "negative quota": (
        _team(PROD, 1, quotas={"h100-train": -1}),
        "gpufleet:teams[1].quotas.h100-train: must be >= 0",
    ),
    "over capacity": (
        _team(PROD, 2, quotas={"l40s-infer": 17}),
        "gpufleet:teams[2].quotas.l40s-infer: quotas on pool 'l40s-infer' add up to 25 GPUs but it can never "
        "have more than 24 (6 nodes x 4)",
    ),
    "duplicate team": (
        _team(PROD, 3, name="research"),
        "gpufleet:teams[3].name: 'research' duplicates teams[1]",
    ),
    "duplicate namespace": (
        _team(PROD, 3, namespace="team-llm"),
        "gpufleet:teams[3].namespace: 'team-llm' is already used by teams[0]",
    ),
    "borrowing beyond lendable": (
        _team(PROD, 0, borrowing_limit=40),
        "gpufleet:teams[0].borrowingLimit: 40 GPUs, but the cohort can lend this team at most 24 GPUs of any pool",
    ),
    "unknown priority": (
        _team(PROD, 1, priority="urgent"),
        "gpufleet:teams[1].priority: unknown priority class 'urgent'; accepted: production, default, preemptible",
    ),
    "short pods-ready timeout on aws": (
        replace(PROD, wait_for_pods_ready_timeout="5m"),
        "gpufleet:scheduling.waitForPodsReadyTimeout: 5m is shorter than GPU node provisioning",
    ),
    "scheduler image of another minor": (
        replace(PROD, kube_scheduler_image_tag="v1.34.5"),
        "gpufleet:versions.kubeSchedulerImage: 'v1.34.5' must match the cluster's Kubernetes minor (v1.35.x)",
    ),
    "system namespace": (
        _team(PROD, 0, namespace="kube-system"),
        "gpufleet:teams[0].namespace: 'kube-system'",
    ),
    "a team named like another team's CPU queue": (
        _team(PROD, 3, name="research-cpu", namespace="team-batch"),
        "gpufleet:teams[3].name: 'research-cpu' is the name of teams[1]'s CPU-only ClusterQueue (research-cpu)",
    ),
    "a team named like another team's topology queue": (
        _team(PROD, 0, name="inference-topology"),
        "gpufleet:teams[0].name: 'inference-topology' is the name of teams[2]'s topology ClusterQueue",
    ),
    "a system PriorityClass for team pods": (
        replace(PROD, pod_priority_classes=("batch-low", "system-node-critical")),
        "gpufleet:scheduling.podPriorityClasses[1]: 'system-node-critical' is a Kubernetes system PriorityClass",
    ),
    "a grace cap that is no duration": (
        replace(PROD, max_termination_grace_period="forever"),
        "gpufleet:scheduling.maxTerminationGracePeriod: 'forever'; accepted: e.g. 30s, 5m",
    ),
    "a group that means every authenticated identity": (
        _team(PROD, 1, groups=("researchers", "system:authenticated")),
        "gpufleet:teams[1].groups[1]: 'system:authenticated' is a Kubernetes system group",
    ),
    "a group that means every ServiceAccount": (
        _team(PROD, 2, groups=("system:serviceaccounts",)),
        "gpufleet:teams[2].groups[0]: 'system:serviceaccounts' is a Kubernetes system group",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_names_the_key(case: str) -> None:
    policy, message = CASES[case]
    assert message in _error(policy)


def test_oversubscription_must_be_explicit() -> None:
    over = _team(METAL, 0, quotas={"h100": 24, "l40s": 4})
    assert "gpufleet:teams[1].quotas.h100: quotas on pool 'h100' add up to 40 GPUs" in _error(
        over, METAL_POOLS
    )
    pools = (replace(METAL_POOLS[0], oversubscribe=True), METAL_POOLS[1])
    assert compile(over, pools)


def test_bad_pools_are_reported() -> None:
    pools = (
        pool("h100-train", "H100", 8, 4),
        pool("h100-train", "H100", 8, 4),
        replace(pool("mig", "H100", 8, 1, sharing="mig", mig_profile="9g.1tb")),  # no instances per GPU
        replace(pool("ts", "L4", 1, 1), sharing="timeSlicing"),
        replace(pool("untainted", "L4", 1, 1), taints=()),
    )
    message = _error(replace(PROD, teams=()), pools)
    assert "gpufleet:nodePools[1].name: 'h100-train' duplicates nodePools[0]" in message
    assert (
        "gpufleet:nodePools[2].sharing.mig: a MIG pool needs its profile and the profile's instances"
        in message
    )
    assert "gpufleet:nodePools[3].sharing.timeSlicing.replicas: must be at least 2" in message
    assert "gpufleet:nodePools[4].taints: must include nvidia.com/gpu=true:NoSchedule" in message
    assert message.startswith("4 problems:")


def test_every_problem_is_listed_at_once() -> None:
    policy = _team(_team(PROD, 1, priority="urgent"), 2, quotas={"nope": 1})
    message = _error(policy)
    assert (
        message.startswith("2 problems:")
        and "teams[1].priority" in message
        and "teams[2].quotas.nope" in message
    )


def test_nothing_is_rendered_on_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    with pytest.raises(SchedulerConfigError):
        render(compile(_team(PROD, 1, quotas={"h100-train": -1}), PROD_POOLS), out)
    assert not out.exists()


def test_provisioning_requests_need_autoscaled_pools() -> None:
    message = _error(replace(METAL, provisioning_requests=True), METAL_POOLS)
    assert message.startswith("gpufleet:scheduling.provisioningRequests: no pool is autoscaled")


def test_a_listed_pool_must_be_autoscaled() -> None:
    policy = replace(
        PROD, provisioning_requests=True, provisioning_pools=("h100-train", "h200", "l40s-infer")
    )
    assert _error(policy).splitlines() == [
        "gpufleet:scheduling.provisioningRequests[1]: 'h200' is not an autoscaled GPU pool; accepted: "
        "h100-train, l40s-infer, a10g-batch, h100-mig"
    ]


def test_teams_must_be_dns_labels() -> None:
    policy = replace(PROD, teams=(TeamPolicy("Research_Team", "research", {}),))
    assert "gpufleet:teams[0].name: 'Research_Team' must be a DNS label" in _error(policy)
