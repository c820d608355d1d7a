"""The AWS platform, in order: network -> cluster -> node groups -> add-ons; returns the stack outputs."""

from __future__ import annotations

from typing import Any

import pulumi

from infra.aws.addons.component import Addons
from infra.aws.cluster import Cluster
from infra.aws.network import Network
from infra.aws.nodegroups import NodeGroups
from infra.aws.team_entries import TeamAccess
from infra.pools import SYSTEM_GROUP, managed_node_group_spec
from infra.spec import ClusterSpec


def build_aws(spec: ClusterSpec) -> dict[str, Any]:
    """Expects a spec that passed `infra.program.check`."""
    name = spec.cluster.name
    network = Network(f"{name}-net", spec)
    cluster = Cluster(name, spec, network)
    TeamAccess(f"{name}-teams", spec, cluster.eks.name)
    # Under Karpenter, only the system group and shared-GPU pools are managed node groups.
    groups = NodeGroups(f"{name}-nodes", managed_node_group_spec(spec), network, cluster)
    Addons(
        f"{name}-addons",
        spec,
        cluster,
        list(groups.groups.values()),
        network=network,
        system_nodes=[groups.groups[SYSTEM_GROUP]],
    )
    return {
        "cluster_name": cluster.eks.name,
        "endpoint": cluster.eks.endpoint,
        "kubeconfig": cluster.kubeconfig,
        "node_group_names": pulumi.Output.all(
            **{pool: g.node_group_name for pool, g in groups.groups.items()}
        ),
        "oidc_provider_arn": cluster.oidc_provider.arn,
    }
