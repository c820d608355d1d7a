"""`TeamAccess`: the teams' EKS access entries (`infra.aws.team_access`), applied to the cluster.

Apart from the cluster's admin entries on purpose: a team entry maps a role to Kubernetes groups only, with no
EKS access policy, so what its members may do is the namespace's RBAC and nothing else.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.aws.team_access import team_entries
from infra.spec import ClusterSpec


class TeamAccess(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        cluster_name: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpufleet:aws:TeamAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.entries = [
            aws.eks.AccessEntry(
                f"{name}-{entry.key}",
                cluster_name=cluster_name,
                principal_arn=entry.principal_arn,
                kubernetes_groups=list(entry.groups),
                type="STANDARD",
                opts=child,
            )
            for entry in team_entries(spec)
        ]
        self.register_outputs({"principal_arns": [e.principal_arn for e in self.entries]})
