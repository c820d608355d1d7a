"""How each pool of a stack scales down and is paid for, as the stack compiles it, for the dynamic simulation.

- **cluster-autoscaler's node groups**: a node goes after the group's unneeded time: the group's
  `autoscaling-options/scaledownunneededtime` tag where the stack writes one (capacity blocks: a year, so never,
  `infra.aws.tags.scale_down_options`), else the stack's `--scale-down-unneeded-time`; no group shrinks within
  the stack's `--scale-down-delay-after-add` of a scale-up (`infra.aws.addons.cluster_autoscaler.ARGS`).
- **Karpenter's NodePools**: an empty node goes after the NodePool's `consolidateAfter` as compiled
  (`infra.aws.karpenter.pools.plan_pool`: the pool's own, else 10m for training and 30m for inference;
  `Never` for reserved capacity).
- **Capacity blocks** (`capacityType: CAPACITY_BLOCK`, or a Karpenter pool only on reserved capacity) are
  bought for a window and paid for whole. The spec does not hold the block's dates (the reservation does), so
  a block is taken as bought for the whole run unless the caller gives the window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra.aws.addons.cluster_autoscaler import ARGS
from infra.aws.karpenter.pools import plan_pool
from infra.aws.nodepools import plan_gpu_pool
from infra.aws.tags import OPTIONS
from infra.pools import karpenter_managed, only_reserved
from infra.spec import ClusterSpec, NodePool

WHOLE_RUN = (0.0, float("inf"))


def duration_s(text: str) -> float:
    """A Go or Kubernetes duration (`10m`, `8760h`, `1h30m`) in seconds; `Never` is for ever (inf)."""
    if text == "Never":
        return float("inf")
    units = {"s": 1, "m": 60, "h": 3600}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(s|m|h)", text)))


UNNEEDED_S = duration_s(ARGS["scale-down-unneeded-time"])
DELAY_AFTER_ADD_S = duration_s(ARGS["scale-down-delay-after-add"])


@dataclass(frozen=True)
class PoolScaling:
    unneeded_s: float  # how long a node stays empty before it goes (inf: never)
    karpenter: bool
    window: tuple[float, float] | None  # a capacity block's window; None: paid by the hour


def pool_scaling(spec: ClusterSpec, pool: NodePool, window: tuple[float, float] = WHOLE_RUN) -> PoolScaling:
    """``pool``'s scale-down and billing (``window``: a capacity block's, if it is one); off aws the
    stack's hosts never scale, and the stack's defaults are returned for form's sake."""
    if spec.platform != "aws":
        return PoolScaling(UNNEEDED_S, False, None)
    if karpenter_managed(spec, pool):
        plan = plan_pool(spec, pool)
        reserved = only_reserved(pool)
        return PoolScaling(duration_s(plan.consolidate_after), True, window if reserved else None)
    tags = plan_gpu_pool(spec, pool).autoscaler_tags
    unneeded = tags.get(f"{OPTIONS}/scaledownunneededtime", ARGS["scale-down-unneeded-time"])
    block = pool.capacity_type == "CAPACITY_BLOCK"
    return PoolScaling(duration_s(unneeded), False, window if block else None)
