"""Properties over generated policies: every pool's capacity is handed out exactly once, and the output is
always consistent and schema-valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from infra.versions import KUEUE_VERSION
from scheduler import SchedulerConfigError, compile
from scheduler.kueue import CPU_SUFFIX
from scheduler.model import PoolView, SchedulingPolicy, TeamPolicy
from scheduler.references import reference_problems
from scheduler.resources import gpu_resource, gpu_units
from scheduler.validation import cel_problems, crd_problems, kueue_rule_problems, load_crd_schemas
from tests.scheduler.examples import pool
from tests.scheduler.helpers import find, flavor_quota, of_kind

SHARING: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {},
        {"sharing": "timeSlicing", "time_slicing_replicas": 4},
        {"sharing": "mig", "mig_profile": "1g.10gb", "mig_instances_per_gpu": 7},
    ]
)


@st.composite
def policies(draw: st.DrawFn) -> tuple[SchedulingPolicy, tuple[PoolView, ...]]:
    pools = tuple(
        pool(f"p{i}", "H100", draw(st.sampled_from([1, 4, 8])), draw(st.integers(0, 4)), **draw(SHARING),
             capacity_type=draw(st.sampled_from(["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"])), node_group=f"ng-{i}")
        for i in range(draw(st.integers(1, 4)))
    )  # fmt: skip
    free = {p.name: p.max_gpus for p in pools}
    teams = []
    for t in range(draw(st.integers(0, 5))):
        quotas = {}
        for p in pools:
            if free[p.name] and draw(st.booleans()):
                quotas[p.name] = draw(st.integers(0, free[p.name]))
                free[p.name] -= quotas[p.name]
        teams.append(
            TeamPolicy(f"team-{t}", f"ns-{t}", quotas, borrowing_limit=draw(st.one_of(st.none(), st.integers(0, 4))),
                       lending_limit=draw(st.one_of(st.none(), st.integers(0, 8))),
                       priority=draw(st.sampled_from(["production", "default", "preemptible"])),
                       groups=(f"g{t}",), weight=draw(st.sampled_from([0.5, 1.0, 3.0])))
        )  # fmt: skip
    policy = SchedulingPolicy(
        teams=tuple(teams),
        fair_sharing=draw(st.booleans()),
        provisioning_requests=draw(st.booleans()),
        kueue_version=KUEUE_VERSION,
    )
    return policy, pools


def compiled(policy: SchedulingPolicy, pools: tuple[PoolView, ...]) -> list[dict[str, Any]]:
    try:
        return compile(policy, pools)
    except SchedulerConfigError as exc:  # a drawn borrowing limit above what the cohort can lend
        assert all(".borrowingLimit:" in p for p in exc.problems), exc.problems
        assume(False)
        raise


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies())
def test_each_pools_capacity_is_assigned_exactly_once(
    case: tuple[SchedulingPolicy, tuple[PoolView, ...]],
) -> None:
    policy, pools = case
    objects = compiled(policy, pools)
    cohort = find(objects, "Cohort", policy.cohort)
    for p in pools:
        resource = gpu_resource(p)
        held = sum(
            flavor_quota(cq, p.name)[resource]["nominalQuota"]
            for cq in of_kind(objects, "ClusterQueue")
            if not cq["metadata"]["name"].endswith(CPU_SUFFIX)  # the CPU queue has no GPU flavor
        )
        spare = 0
        if cohort["spec"].get("resourceGroups") and p.name in [
            f["name"] for f in cohort["spec"]["resourceGroups"][-1]["flavors"]
        ]:
            spare = flavor_quota(cohort, p.name)[resource]["nominalQuota"]
        assert held + spare == gpu_units(p, p.max_gpus)
    assert reference_problems(objects, policy, pools) == []


@pytest.fixture(scope="module")
def schemas(shared_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    schemas = load_crd_schemas(shared_dir / "crds", ["kueue.x-k8s.io"])
    # Load the CEL runtime (it raises the recursion limit on import) before hypothesis starts measuring.
    assert (
        cel_problems(
            find(compile(SchedulingPolicy(kueue_version=KUEUE_VERSION), ()), "ResourceFlavor", "cpu-only"),
            schemas,
        )
        == []
    )
    return schemas


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=policies())
def test_generated_policies_compile_to_schema_valid_kueue_objects(
    case: tuple[SchedulingPolicy, tuple[PoolView, ...]], schemas: dict[tuple[str, str], dict[str, Any]]
) -> None:
    policy, pools = case
    kueue = [o for o in compiled(policy, pools) if o["apiVersion"].startswith("kueue.x-k8s.io/")]
    assert [
        p for o in kueue for p in crd_problems(o, schemas) + cel_problems(o, schemas) + kueue_rule_problems(o)
    ] == []
