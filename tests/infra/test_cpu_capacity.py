"""CPU-only work on EKS runs on the untainted system pool unless the stack names CPU nodes; `invoke plan` says when
the teams' CPU-only allowances cannot fit there (Kueue admits by quota alone)."""

from __future__ import annotations

import copy

import yaml

from infra.scheduling import cpu_capacity_warnings
from infra.stackfile import parse_config
from tests.conftest import ROOT

PROD = yaml.safe_load((ROOT / "Pulumi.example-prod.yaml").read_text())["config"]


def variant(**teams_cpu: int) -> dict:
    config = copy.deepcopy(PROD)
    for team in config["gpufleet:teams"]:
        if team["name"] in teams_cpu:
            team["cpuQuota"] = teams_cpu[team["name"]]
    return config


def test_example_prod_fits_its_system_pool() -> None:
    assert cpu_capacity_warnings(parse_config(PROD, "example-prod")) == []


def test_allowances_beyond_the_system_pool_are_named() -> None:
    """4 teams, 8 + 8 + 8 + 40 = 64 cores against 6 x m6i.2xlarge (8 vCPUs each, infra/catalog.py) = 48."""
    (warning,) = cpu_capacity_warnings(parse_config(variant(batch=40), "example-prod"))
    assert "64 cores in all" in warning and "48 cores" in warning and "cpuNodeLabels" in warning


def test_named_cpu_nodes_or_an_existing_cluster_are_not_judged() -> None:
    config = variant(batch=400)
    config["gpufleet:scheduling"] = {
        **config.get("gpufleet:scheduling", {}),
        "cpuNodeLabels": {"role": "cpu"},
    }
    assert cpu_capacity_warnings(parse_config(config, "example-prod")) == []
    metal = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    assert cpu_capacity_warnings(parse_config(metal, "metal")) == []
