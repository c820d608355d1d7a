"""The node groups cluster-autoscaler sees on an aws stack, with what it knows of each: pure, from the spec.

- **Which groups.** Auto-discovery takes every Auto Scaling group tagged `k8s.io/cluster-autoscaler/enabled`
  (cluster-autoscaler 1.35.2 cloudprovider/aws/README.md, "Auto-Discovery Setup"): the managed node groups the
  stack tags (`infra.aws.tags.autoscaler_tags`), the system group among them. Karpenter's pools have no group
  and are Karpenter's to scale, never this stand-in's.
- **The template.** With a Ready node in the group the autoscaler copies it; with none it builds one from the
  instance type and the group's node-template tags, with allocatable equal to capacity
  (cloudprovider/aws/aws_manager.go:297, `buildNodeFromTemplate`): no kubelet reservation, so a pod sized
  between a node's allocatable and its capacity triggers a scale-up from zero it can never use.
- **Scale-down settings.** The stack's flags (`infra.aws.addons.cluster_autoscaler.ARGS`) and each group's
  `autoscaling-options` tags, which override them per group (cloudprovider/aws/README.md, "Per-ASG overrides"):
  capacity blocks keep their nodes.
- **Provisioning time.** A new node is Ready after its instance family's boot time, the one the dynamic
  simulator uses (`infra.catalog.provision_delay_s`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from infra import catalog
from infra.aws.addons.cluster_autoscaler import ARGS
from infra.aws.nodepools import plan_node_groups
from infra.aws.tags import CA_ENABLED, OPTIONS
from infra.pools import karpenter_managed
from infra.spec import ClusterSpec
from twin.autoscaler.fit import quantity
from twin.nodes import TwinNode, twin_nodes

NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def seconds(duration: str) -> float:
    """A Go duration (`10m`, `8760h`, `1h30m`) in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class NodeGroup:
    name: str
    nodes: tuple[TwinNode, ...]  # every node the group can have, in name order
    min_size: int
    max_size: int
    provision_s: float
    unneeded_s: float
    capacity: dict[str, float] = field(
        default_factory=dict
    )  # the template from zero (allocatable = capacity)

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.nodes[0].labels)

    @property
    def taints(self) -> tuple[dict[str, str], ...]:
        return self.nodes[0].taints


def node_groups(spec: ClusterSpec) -> list[NodeGroup]:
    """The groups the autoscaler manages, in plan order (none on an existing cluster)."""
    if spec.platform != "aws":
        return []
    pools = {p.name: p for p in spec.node_pools}
    by_group: dict[str, list[TwinNode]] = {}
    for node in twin_nodes(spec, "max"):
        by_group.setdefault(node.labels.get(NODEGROUP_LABEL, ""), []).append(node)
    out = []
    for plan in plan_node_groups(spec):
        pool = pools.get(plan.pool)
        if (pool is not None and karpenter_managed(spec, pool)) or plan.autoscaler_tags.get(
            CA_ENABLED
        ) != "true":
            continue
        nodes = tuple(sorted(by_group.get(plan.name, []), key=lambda n: n.name))
        if not nodes:
            continue
        unneeded = plan.autoscaler_tags.get(
            f"{OPTIONS}/scaledownunneededtime", ARGS["scale-down-unneeded-time"]
        )
        out.append(
            NodeGroup(
                name=plan.name,
                nodes=nodes,
                min_size=plan.min_size,
                max_size=max(plan.max_size, plan.desired_size),
                provision_s=catalog.provision_delay_s(catalog.CATALOG[plan.instance_type].family),
                unneeded_s=seconds(unneeded),
                capacity={k: quantity(v) for k, v in nodes[0].template.items()},
            )
        )
    return out


def priority_order(priorities: dict[int, list[str]], groups: list[str]) -> list[list[str]]:
    """The groups in the priority expander's tiers, highest first (a group matches a tier when one of its
    regular expressions matches inside the group's name, expander/priority/priority.go); unmatched groups
    last."""
    tiers: list[list[str]] = []
    placed: set[str] = set()
    for _prio, patterns in sorted(priorities.items(), reverse=True):
        tier = [g for g in groups if g not in placed and any(re.search(p, g) for p in patterns)]
        if tier:
            tiers.append(tier)
            placed.update(tier)
    rest = [g for g in groups if g not in placed]
    return [*tiers, rest] if rest else tiers


DELAY_AFTER_ADD_S = seconds(ARGS["scale-down-delay-after-add"])
