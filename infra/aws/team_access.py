"""How a team's members reach an EKS cluster: each IAM role the team declares (`teams[].roleArns`) becomes one
access entry whose Kubernetes groups are the team's `groups`, the subjects the namespace's RoleBindings and the
queue reader already bind. The entries carry no access policy: RBAC alone says what the team may do.

On a cluster in authentication mode API an IAM principal reaches Kubernetes only through an access entry, and
EKS takes one entry per principal (EKS User Guide, "Create access entries"), so a role belongs to one team and
is never also an admin role. Pure: the entries as data and their spec rules; `infra.aws.team_entries` applies
them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra.problems import TEAMS
from infra.spec import ClusterSpec

# An IAM role, with or without a path: access entries accept a path (an Identity Center role has
# `aws-reserved/sso.amazonaws.com/...`), unlike the aws-auth ConfigMap.
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
ROLE_ARN_EXAMPLE = "arn:aws:iam::123456789012:role/ml-research"


@dataclass(frozen=True)
class TeamEntry:
    """One access entry: a team's IAM role mapped to the team's Kubernetes groups."""

    key: str  # `<team>-<index in the team's roleArns>`: adding a role to one team renames no other entry
    principal_arn: str
    groups: tuple[str, ...]


def team_entries(spec: ClusterSpec) -> list[TeamEntry]:
    """Every team's roles, in spec order; expects a spec that passed `team_access_problems`."""
    return [
        TeamEntry(f"{team.name}-{j}", arn, tuple(team.groups))
        for team in spec.teams
        for j, arn in enumerate(team.role_arns)
    ]


def team_access_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """Each role an IAM role ARN, on the aws platform, of a team with groups, in no other entry."""
    owners: dict[str, str] = {arn: "gpufleet:cluster.adminRoleArns" for arn in spec.cluster.admin_role_arns}
    for i, team in enumerate(spec.teams):
        at = f"{TEAMS}[{i}].roleArns"
        if not team.role_arns:
            continue
        if spec.platform != "aws":
            problems.append(
                f"{at}: only on platform aws (EKS access entries); on this cluster map the team's groups in its "
                'own identity provider (docs/existing.md, "Giving a team access")'
            )
            continue
        if not team.groups:
            problems.append(
                f"{at}: needs {TEAMS}[{i}].groups, the Kubernetes groups the roles are mapped to and the "
                "namespace's RoleBindings bind"
            )
        for j, arn in enumerate(team.role_arns):
            if not ROLE_ARN.match(arn):
                problems.append(
                    f"{at}[{j}]: {arn!r} is not an IAM role ARN; accepted: e.g. {ROLE_ARN_EXAMPLE}"
                )
            elif arn in owners:
                problems.append(
                    f"{at}[{j}]: {arn} is already in {owners[arn]}; EKS takes one access entry per principal"
                )
            else:
                owners[arn] = f"{TEAMS}[{i}].roleArns"
