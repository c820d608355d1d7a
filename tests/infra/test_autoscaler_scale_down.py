"""Scale-down of the cluster-autoscaler's node groups, checked against the rule the pinned autoscaler applies.

cluster-autoscaler `core/scaledown/eligibility/eligibility.go` @cluster-autoscaler-1.35.2: a node stays a
scale-down candidate unless `utilInfo.Utilization > threshold`, i.e. it is "underutilized" at or below the
threshold (commit 8704d355ab, kubernetes/autoscaler#8975 "Fix scale-down eligibility when utilization and
threshold are zero", cherry-picked to 1.32-1.35). The threshold is the GPU one for nodes carrying the provider's
GPU label (`k8s.amazonaws.com/accelerator` on AWS), else the CPU/memory one. An underutilized node is removed
once it has been unneeded for `scale-down-unneeded-time`. Per-ASG overrides of both come from the
`k8s.io/cluster-autoscaler/node-template/autoscaling-options/*` tags (cloudprovider/aws/README.md @1.35.2).
"""

from __future__ import annotations

import re
from datetime import timedelta

from infra.aws.addons.cluster_autoscaler import ARGS
from infra.aws.nodepools import NodeGroupPlan, plan_node_groups
from infra.aws.tags import OPTIONS
from infra.scheduling import ACCELERATOR_LABEL
from tests.conftest import load_example

CAPACITY_BLOCK_MAX = timedelta(days=182)  # EC2 Capacity Blocks for ML: 1-14 days, or up to 182 in 7-day steps


def _duration(value: str) -> timedelta:
    """A Go `time.ParseDuration` string of hours/minutes/seconds, as the autoscaler parses the tag."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", value)
    assert parts and value, value
    h, m, s = (int(p or 0) for p in parts.groups())
    return timedelta(hours=h, minutes=m, seconds=s)


def _gpu_node(plan: NodeGroupPlan) -> bool:
    return f"k8s.io/cluster-autoscaler/node-template/label/{ACCELERATOR_LABEL}" in plan.autoscaler_tags


def eligible_for_scale_down(plan: NodeGroupPlan, gpu_utilization: float, utilization: float) -> bool:
    """eligibility.go's test for one node of the group: not eligible when utilization > threshold."""
    if _gpu_node(plan):
        default = float(ARGS.get("scale-down-gpu-utilization-threshold", "0.5"))  # FAQ.md: default 0.5
        threshold = float(plan.autoscaler_tags.get(f"{OPTIONS}/scaledowngpuutilizationthreshold", default))
        return not gpu_utilization > threshold
    default = float(ARGS["scale-down-utilization-threshold"])
    threshold = float(plan.autoscaler_tags.get(f"{OPTIONS}/scaledownutilizationthreshold", default))
    return not utilization > threshold


def unneeded_time(plan: NodeGroupPlan) -> timedelta:
    return _duration(
        plan.autoscaler_tags.get(f"{OPTIONS}/scaledownunneededtime", ARGS["scale-down-unneeded-time"])
    )


def test_an_idle_capacity_block_node_is_never_removed_while_the_block_lasts() -> None:
    """Utilization thresholds of 0 would keep nothing: an empty node, utilization 0, is at or below 0 and so
    eligible. What keeps it is an unneeded time longer than any capacity block."""
    plans = {p.pool: p for p in plan_node_groups(load_example("example-prod"))}
    train = plans["h100-train"]
    assert eligible_for_scale_down(train, gpu_utilization=0.0, utilization=0.0)  # the upstream rule
    assert unneeded_time(train) > CAPACITY_BLOCK_MAX
    # Other pools keep the cluster-wide idle time: an empty paid-per-hour GPU node goes after 10 minutes.
    for pool in ("l40s-infer", "a10g-batch", "h100-mig"):
        assert unneeded_time(plans[pool]) == timedelta(minutes=10), pool


def test_scale_down_never_evicts_a_running_gpu_pod_from_a_gpu_node() -> None:
    """FAQ.md @cluster-autoscaler-1.35.2 ("What types of pods can prevent CA from removing a node?"): Job pods
    are evictable, so a partly used GPU node whose pods fit elsewhere is drained. With the GPU threshold at 0,
    any requested GPU makes the node ineligible; an empty GPU node still is."""
    plans = {p.pool: p for p in plan_node_groups(load_example("example-prod"))}
    gpu_pools = [p for p in plans.values() if _gpu_node(p)]
    assert {p.pool for p in gpu_pools} == {"h100-train", "l40s-infer"}
    for plan in gpu_pools:
        assert not eligible_for_scale_down(plan, gpu_utilization=1 / 8, utilization=0.05), plan.pool
        assert eligible_for_scale_down(plan, gpu_utilization=0.0, utilization=0.05), plan.pool
    assert _duration("8760h") == timedelta(days=365)
