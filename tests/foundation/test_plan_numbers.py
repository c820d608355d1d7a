"""Plan numbers for the example stacks, against values computed by hand from the catalog's list prices.

dev:  g6e.xlarge $1.861/h, 0-2 nodes -> max 2 x 1.861 x 730 = $2,717.06; system m6i.xlarge $0.192/h,
      2-3 nodes -> $280.32 / $420.48; vCPUs at max: 2 x 4 = 8 (G on-demand), 3 x 4 = 12 (standard).
prod: p5.48xlarge $55.04/h: 4 nodes -> $160,716.80 (capacity block, no vCPU quota), 1 node -> $40,179.20;
      g6e.12xlarge $10.49264/h: 1 node $7,659.63, 6 nodes $45,957.76, 6 x 48 = 288 vCPUs;
      g5.2xlarge spot $1.212/h: 16 nodes $14,156.16, 16 x 8 = 128 vCPUs; m6i.2xlarge $0.384/h: 3 nodes
      $840.96, 6 nodes $1,681.92, 6 x 8 = 48 vCPUs.
"""

from __future__ import annotations

import pytest

from infra.plan import build_plan
from tests.conftest import load_example


def test_dev_plan() -> None:
    plan = build_plan(load_example("dev"))
    (pool,) = plan.pools
    assert (pool.instance_type, pool.gpu_model, pool.gpus_per_node) == ("g6e.xlarge", "L40S", 1)
    assert (pool.min_nodes, pool.max_nodes, pool.min_gpus, pool.max_gpus) == (0, 2, 0, 2)
    assert (pool.monthly_cost_min, pool.monthly_cost_max) == (0.0, 2717.06)
    assert plan.system_pool is not None
    assert (plan.system_pool["monthly_cost_min"], plan.system_pool["monthly_cost_max"]) == (280.32, 420.48)
    assert {q["code"]: q["vcpus_at_max"] for q in plan.quotas} == {"L-DB2E81BA": 8, "L-1216C47A": 12}
    assert plan.totals == {
        "min_gpus": 0,
        "max_gpus": 2,
        "monthly_cost_min": 280.32,
        "monthly_cost_max": 3137.54,
    }
    assert plan.teams[0]["quotas"] == {"l40s": 2}


def test_prod_plan() -> None:
    plan = build_plan(load_example("example-prod"))
    pools = {p.name: p for p in plan.pools}
    assert (pools["h100-train"].max_gpus, pools["h100-train"].quota_code) == (32, None)
    assert pools["h100-train"].monthly_cost_max == 160716.80
    assert (pools["l40s-infer"].min_gpus, pools["l40s-infer"].max_gpus) == (4, 24)
    assert (pools["l40s-infer"].monthly_cost_min, pools["l40s-infer"].monthly_cost_max) == (7659.63, 45957.76)
    assert (pools["a10g-batch"].capacity_type, pools["a10g-batch"].monthly_cost_max) == ("SPOT", 14156.16)
    assert pools["h100-mig"].monthly_cost_max == 40179.20
    assert {q["code"]: q["vcpus_at_max"] for q in plan.quotas} == {
        "L-1216C47A": 48,
        "L-3819A6DF": 128,
        "L-417A185B": 192,
        "L-DB2E81BA": 288,
    }
    assert plan.totals["min_gpus"] == 4 and plan.totals["max_gpus"] == 80
    assert plan.totals["monthly_cost_min"] == pytest.approx(8500.59)
    assert plan.totals["monthly_cost_max"] == pytest.approx(262691.84)
    research = next(t for t in plan.teams if t["name"] == "research")
    assert research["quotas"] == {"h100-train": 8, "l40s-infer": 8, "h100-mig": 4}
    assert any("SPOT" in n for n in plan.notes) and any("CAPACITY_BLOCK" in n for n in plan.notes)


def test_metal_plan_counts_hosts_and_has_no_cloud_cost() -> None:
    plan = build_plan(load_example("metal"))
    assert [(p.name, p.max_nodes, p.max_gpus) for p in plan.pools] == [("h100", 4, 32), ("l40s", 3, 12)]
    assert plan.totals == {"min_gpus": 44, "max_gpus": 44, "monthly_cost_min": None, "monthly_cost_max": None}
    assert plan.quotas == [] and plan.system_pool is None
