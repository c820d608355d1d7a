"""Who the team rules trust, as CEL over the admission request: Kueue's controller, and the cluster's own
controllers.

Kueue's controller runs as the chart's `<release>-controller-manager` ServiceAccount in Kueue's namespace; it
alone lifts Kueue's gates and writes the admitted flavor into a job.

A trusted controller is any Kubernetes system identity (a `system:` user name, which Kubernetes reserves for its
own components and ServiceAccounts) that is not a ServiceAccount of a team namespace: the controller manager's
controllers (`system:serviceaccount:kube-system:job-controller`, ...), the job frameworks' operators (KubeRay,
the Kubeflow training operator, JobSet, LeaderWorkerSet) and Kueue run in the platform's namespaces. A team's
own ServiceAccounts are excluded, the request's namespace and every team namespace the stack knows, because a
member runs pods as them; `system:anonymous` is excluded too. Who may act as a platform controller is RBAC's
decision, outside team namespaces, and team groups may not be `system:` groups (scheduler.checks).
"""

from __future__ import annotations

from scheduler.labels import KUEUE_NAMESPACE
from scheduler.model import SchedulingPolicy

KUEUE_SERVICE_ACCOUNT = "kueue-controller-manager"  # the chart's `<release>-controller-manager`
KUEUE_USER = f"system:serviceaccount:{KUEUE_NAMESPACE}:{KUEUE_SERVICE_ACCOUNT}"
BY_KUEUE = f"request.userInfo.username == '{KUEUE_USER}'"
BY_USER = f"request.userInfo.username != '{KUEUE_USER}'"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def trusted(policy: SchedulingPolicy) -> str:
    """CEL: the request comes from a platform controller, not from a member or a team's ServiceAccount."""
    user = "request.userInfo.username"
    team_accounts = sorted({team.namespace for team in policy.teams})
    return (
        f"({user}.startsWith('system:') && {user} != 'system:anonymous' && "
        f"!{user}.startsWith('{SERVICE_ACCOUNT_PREFIX}' + request.namespace + ':') && "
        f"!{team_accounts!r}.exists(ns, {user}.startsWith('{SERVICE_ACCOUNT_PREFIX}' + ns + ':')))"
    )
