"""What `invoke plan` shows for Karpenter pools: NodePool limits, allowed types and capacity, and a cost range.

A Karpenter pool starts at zero nodes and may launch any allowed type, so its monthly cost at maximum is a
range: every node the cheapest allowed type, or every node the dearest (On-Demand list prices; reserved
capacity is prepaid, spot is cheaper than shown).
"""

from __future__ import annotations

from typing import Any

from infra import catalog
from infra.aws.karpenter.pools import plan_pool
from infra.pools import allowed_instance_types, karpenter_pools
from infra.spec import ClusterSpec


def dearest(types: list[str]) -> catalog.InstanceType:
    """The allowed type that costs most at maximum size (unpriced types last), for upper bounds."""
    return max((catalog.CATALOG[t] for t in types), key=lambda t: (t.price_per_hour or 0.0, t.vcpus))


def karpenter_rows(spec: ClusterSpec) -> list[dict[str, Any]]:
    rows = []
    for pool in karpenter_pools(spec):
        plan = plan_pool(spec, pool)
        prices = [
            p
            for p in (catalog.CATALOG[t].price_per_hour for t in allowed_instance_types(pool))
            if p is not None
        ]
        n = pool.max_size or 0
        hours = catalog.HOURS_PER_MONTH
        rows.append(
            {
                "pool": pool.name,
                "instance_types": list(plan.instance_types),
                "capacity_types": list(plan.capacity_types),
                "zones": list(plan.zones),
                "workload": plan.workload,
                "consolidation": f"{plan.consolidation_policy} after {plan.consolidate_after}",
                "expire_after": plan.expire_after,
                "termination_grace_period": plan.termination_grace_period or "Never",
                "limits": dict(plan.limits),
                "monthly_cost_min": 0.0,
                "monthly_cost_max_low": round(n * min(prices) * hours, 2) if prices else None,
                "monthly_cost_max_high": round(n * max(prices) * hours, 2) if prices else None,
            }
        )
    return rows
