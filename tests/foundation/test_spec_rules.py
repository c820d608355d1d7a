"""Every validation rule: a bad input whose message names the exact key path and what is accepted."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from infra.errors import ConfigError
from infra.stackfile import parse_config
from tests.conftest import ROOT

Config = dict[str, Any]


def example(name: str) -> Config:
    return yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text())["config"]


def problems_for(config: Config) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    return info.value.problems


def pools(c: Config) -> list[dict[str, Any]]:
    return c["gpufleet:nodePools"]


def teams(c: Config) -> list[dict[str, Any]]:
    return c["gpufleet:teams"]


def _set(path: list[Any], value: Any) -> Callable[[Config], None]:
    def mutate(c: Config) -> None:
        node: Any = c
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


NP = "gpufleet:nodePools"
CASES: list[tuple[str, str, Callable[[Config], None], str, str]] = [
    # (id, stack, mutation, expected key path, expected words)
    (
        "max-below-min",
        "example-prod",
        _set([NP, 1, "maxSize"], 0),
        "gpufleet:nodePools[1]",
        "minSize <= desiredSize",
    ),
    (
        "desired-above-max",
        "example-prod",
        _set([NP, 1, "desiredSize"], 9),
        "gpufleet:nodePools[1]",
        "1 <= 9 <= 6",
    ),
    (
        "negative-size",
        "dev",
        _set([NP, 0, "minSize"], -1),
        "gpufleet:nodePools[0].minSize",
        "greater than or equal",
    ),
    ("typo-key", "dev", _set([NP, 0, "maxSzie"], 3), "gpufleet:nodePools[0].maxSzie", "unknown key"),
    ("typo-section", "dev", _set(["gpufleet:nodepools"], []), "gpufleet:nodepools", "accepted"),
    (
        "bad-capacity-type",
        "dev",
        _set([NP, 0, "capacityType"], "RESERVED"),
        "nodePools[0].capacityType",
        "SPOT",
    ),
    (
        "not-in-catalog",
        "dev",
        _set([NP, 0, "instanceType"], "g6e.3xlarge"),
        "nodePools[0].instanceType",
        "g6e.xlarge",
    ),
    (
        "cpu-type-for-gpu-pool",
        "dev",
        _set([NP, 0, "instanceType"], "m6i.xlarge"),
        "nodePools[0].instanceType",
        "no GPUs",
    ),
    ("efa-not-capable", "dev", _set([NP, 0, "efa"], True), "gpufleet:nodePools[0].efa", "no EFA interfaces"),
    (
        "cb-no-reservation",
        "example-prod",
        lambda c: pools(c)[0].pop("capacityReservationId"),
        "nodePools[0].capacityReservationId",
        "required for CAPACITY_BLOCK",
    ),
    (
        "cb-no-zone",
        "example-prod",
        lambda c: pools(c)[0].pop("availabilityZone"),
        "nodePools[0].availabilityZone",
        "required for CAPACITY_BLOCK",
    ),
    (
        "cb-zone-elsewhere",
        "example-prod",
        _set([NP, 0, "availabilityZone"], "us-east-1f"),
        "nodePools[0].availabilityZone",
        "not one of the cluster's zones",
    ),
    (
        "reservation-on-demand",
        "dev",
        _set([NP, 0, "capacityReservationId"], "cr-0123456789abcdef0"),
        "nodePools[0].capacityReservationId",
        "only for capacityType CAPACITY_BLOCK",
    ),
    (
        "al2-refused",
        "dev",
        _set([NP, 0, "amiFamily"], "AL2_x86_64_GPU"),
        "nodePools[0].amiFamily",
        "end of support",
    ),
    (
        "duplicate-pool",
        "example-prod",
        _set([NP, 2, "name"], "l40s-infer"),
        "gpufleet:nodePools",
        "duplicate pool",
    ),
    (
        "duplicate-team",
        "example-prod",
        _set(["gpufleet:teams", 1, "name"], "llm-training"),
        "gpufleet:teams[1].name",
        "duplicates teams[0]",
    ),
    (
        "duplicate-namespace",
        "example-prod",
        _set(["gpufleet:teams", 1, "namespace"], "team-llm"),
        "gpufleet:teams[1].namespace",
        "'team-llm' is already used",
    ),
    (
        "quota-unknown-pool",
        "dev",
        _set(["gpufleet:teams", 0, "quotas"], {"h100": 1}),
        "gpufleet:teams[0].quotas.h100",
        "unknown pool; accepted: l40s",
    ),
    (
        "negative-quota",
        "dev",
        _set(["gpufleet:teams", 0, "quotas"], {"l40s": -1}),
        "gpufleet:teams[0].quotas.l40s",
        "greater than or equal",
    ),
    (
        "quota-over-capacity",
        "dev",
        _set(["gpufleet:teams", 0, "quotas"], {"l40s": 3}),
        "gpufleet:teams[0].quotas.l40s",
        "oversubscribe: true",
    ),
    (
        "k8s-too-old",
        "dev",
        _set(["gpufleet:cluster", "kubernetesVersion"], "1.27"),
        "gpufleet:cluster.kubernetesVersion",
        "supported range",
    ),
    (
        "public-no-cidrs",
        "dev",
        _set(["gpufleet:cluster", "endpointAccess"], {"public": True}),
        "endpointAccess.publicCidrs",
        "allow-list",
    ),
    (
        "world-open",
        "dev",
        _set(["gpufleet:cluster", "endpointAccess"], {"public": True, "publicCidrs": ["0.0.0.0/0"]}),
        "endpointAccess.publicCidrs",
        "whole internet",
    ),
    (
        "unknown-priority",
        "dev",
        _set(["gpufleet:teams", 0, "priority"], "urgent"),
        "gpufleet:teams[0].priority",
        "production",
    ),
    (
        "borrow-more-than-lendable",
        "example-prod",
        _set(["gpufleet:teams", 1, "borrowingLimit"], 100),
        "gpufleet:teams[1].borrowingLimit",
        "can lend",
    ),
    (
        "mig-unsupported-gpu",
        "dev",
        _set([NP, 0, "sharing"], {"mig": "1g.10gb"}),
        "nodePools[0].sharing.mig",
        "does not support MIG",
    ),
    (
        "mig-bad-profile",
        "example-prod",
        _set([NP, 3, "sharing"], {"mig": "1g.5gb"}),
        "nodePools[3].sharing.mig",
        "1g.10gb",
    ),
    ("bad-sharing", "dev", _set([NP, 0, "sharing"], "shared"), "nodePools[0].sharing", "timeSlicing"),
    ("missing-region", "dev", lambda c: c.pop("aws:region"), "aws:region", "required"),
    (
        "system-pool-gpu",
        "dev",
        _set(["gpufleet:systemPool", "instanceType"], "g5.xlarge"),
        "gpufleet:systemPool.instanceType",
        "not a CPU type",
    ),
    (
        "metal-no-kubeconfig",
        "metal",
        lambda c: c["gpufleet:cluster"].pop("kubeconfig"),
        "gpufleet:cluster.kubeconfig",
        "required for platform existing",
    ),
    ("metal-unknown-model", "metal", _set([NP, 0, "gpuModel"], "H1OO"), "nodePools[0].gpuModel", "H100"),
    (
        "metal-instance-type",
        "metal",
        _set([NP, 0, "instanceType"], "p5.48xlarge"),
        "nodePools[0].instanceType",
        "only for platform aws",
    ),
    ("metal-size", "metal", _set([NP, 0, "maxSize"], 9), "nodePools[0].maxSize", "len(hosts) = 4"),
    (
        "reserved-label",
        "dev",
        _set([NP, 0, "labels"], {"gpufleet.io/pool": "x"}),
        "labels.gpufleet.io/pool",
        "set by gpufleet",
    ),
]


@pytest.mark.parametrize(
    ("stack", "mutate", "path", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rule_names_key_path(stack: str, mutate: Callable[[Config], None], path: str, words: str) -> None:
    config = copy.deepcopy(example(stack))
    mutate(config)
    problems = problems_for(config)
    matching = [p for p in problems if path in p]
    assert matching, f"no problem names {path}: {problems}"
    assert any(words in p for p in matching), f"{words!r} not in {matching}"


def test_all_problems_reported_at_once() -> None:
    config = copy.deepcopy(example("example-prod"))
    pools(config)[1]["desiredSize"] = 99
    pools(config)[2]["instanceType"] = "g9.nothing"
    config["gpufleet:cluster"]["kubernetesVersion"] = "1.20"
    problems = problems_for(config)
    assert len(problems) >= 3
    for path in (
        "gpufleet:nodePools[1]:",
        "gpufleet:nodePools[2].instanceType:",
        "gpufleet:cluster.kubernetesVersion:",
    ):
        assert any(p.startswith(path) for p in problems), (path, problems)


def test_oversubscribe_allows_quotas_over_capacity() -> None:
    config = copy.deepcopy(example("dev"))
    teams(config)[0]["quotas"] = {"l40s": 3}
    pools(config)[0]["oversubscribe"] = True
    assert parse_config(config, "dev").teams[0].quotas == {"l40s": 3}


def test_catalog_facts_resolved_onto_pools() -> None:
    spec = parse_config(example("example-prod"), "example-prod")
    h100 = spec.pool("h100-train")
    assert (h100.gpu_model, h100.gpus_per_node, h100.max_gpus) == ("H100", 8, 32)
    assert spec.versions.al2023_nvidia_ami_release is not None
    assert spec.versions.al2023_nvidia_ami_release.startswith(spec.cluster.kubernetes_version + ".")
