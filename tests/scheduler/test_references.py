"""Cross-object references: every name an object points at exists, and flavors match real pools."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from scheduler import compile
from scheduler.checks import max_admitted_gpus
from scheduler.references import reference_problems
from scheduler.resources import gpu_resource, gpu_units
from tests.scheduler.examples import EXAMPLES, PROD, PROD_POOLS
from tests.scheduler.helpers import find, flavor_quota, of_kind


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_examples_have_no_dangling_references(example: str) -> None:
    policy, pools = EXAMPLES[example]
    autoscaled = policy.platform == "aws"
    for variant in (policy, replace(policy, provisioning_requests=True)) if autoscaled else (policy,):
        assert reference_problems(compile(variant, pools), variant, pools) == []


def _broken(mutate: Callable[[list[dict[str, Any]]], None]) -> list[str]:
    objects = copy.deepcopy(compile(replace(PROD, provisioning_requests=True), PROD_POOLS))
    mutate(objects)
    return reference_problems(objects, PROD, PROD_POOLS)


def test_each_kind_of_broken_reference_is_reported() -> None:
    def lq(objs: list[dict[str, Any]]) -> None:
        find(objs, "LocalQueue", "default", "team-llm")["spec"]["clusterQueue"] = "nope"

    def cohort(objs: list[dict[str, Any]]) -> None:
        find(objs, "ClusterQueue", "batch")["spec"]["cohortName"] = "other"

    def flavor(objs: list[dict[str, Any]]) -> None:
        objs.remove(find(objs, "ResourceFlavor", "h100-mig"))

    def labels(objs: list[dict[str, Any]]) -> None:
        find(objs, "ResourceFlavor", "l40s-infer")["spec"]["nodeLabels"] = {"gpufleet.io/pool": "l40s"}

    def toleration(objs: list[dict[str, Any]]) -> None:
        find(objs, "ResourceFlavor", "a10g-batch")["spec"]["tolerations"] = []

    def namespace(objs: list[dict[str, Any]]) -> None:
        objs.remove(find(objs, "Namespace", "team-batch"))

    def group(objs: list[dict[str, Any]]) -> None:
        of_kind(objs, "RoleBinding")[0]["subjects"][0]["name"] = "system:masters"

    def check(objs: list[dict[str, Any]]) -> None:
        objs.remove(find(objs, "ProvisioningRequestConfig", "gpufleet-provisioning"))

    expected = {
        lq: "ClusterQueue nope does not exist",
        cohort: "Cohort other does not exist",
        flavor: "ResourceFlavor h100-mig does not exist",
        labels: "are not labels of pool l40s-infer",
        toleration: "does not tolerate taint nvidia.com/gpu=true:NoSchedule",
        namespace: "namespace team-batch is not created",
        group: "group system:masters is not in any team's groups",
        check: "ProvisioningRequestConfig gpufleet-provisioning missing",
    }
    for mutate, message in expected.items():
        problems = _broken(mutate)
        assert any(message in p for p in problems), (message, problems)


def test_gpu_ceiling_never_blocks_what_kueue_can_admit() -> None:
    objects = compile(PROD, PROD_POOLS)
    for team in PROD.teams:
        hard = find(objects, "ResourceQuota", "gpu-ceiling", team.namespace)["spec"]["hard"]
        admissible: dict[str, int] = {}
        for pool in PROD_POOLS:
            queue = team.name + ("-topology" if pool.topology_levels else "")
            entry = flavor_quota(find(objects, "ClusterQueue", queue), pool.name)[gpu_resource(pool)]
            limit = entry.get("borrowingLimit", gpu_units(pool, pool.max_gpus))
            most = min(
                entry["nominalQuota"] + limit, max(gpu_units(pool, pool.max_gpus), entry["nominalQuota"])
            )
            assert most == gpu_units(pool, max_admitted_gpus(team, pool))
            admissible[gpu_resource(pool)] = admissible.get(gpu_resource(pool), 0) + most
        for resource, units in admissible.items():
            assert int(hard[f"requests.{resource}"]) >= units
