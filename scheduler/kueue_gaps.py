"""What the Kueue release the twin runs (v0.19.2) gets wrong in integrations the stack enables, refused in team
namespaces so no job can use it to run beyond its team's quota.

Kueue's later 0.19 patches fix these (kubernetes-sigs/kueue CHANGELOG-0.19: v0.19.6 and v0.19.7); the twin can
build v0.19.2 only, so the policy is what keeps the guarantee on the Kueue the project can prove against:
- a Job whose `parallelism` exceeds its `completions`: Kueue released the quota of pods still running once
  the succeeded ones and the running ones passed `completions`, and admitted other Workloads beyond the
  ClusterQueue's quota (kubernetes-sigs/kueue#16132, fixed in v0.19.6). The Job controller never runs more than
  the remaining completions anyway (kubernetes.io "Jobs": parallelism), so nothing is lost by asking for at
  most `completions`;
- a StatefulSet or LeaderWorkerSet whose pod template changes: during the rolling update that follows, Kueue
  ungated the new pods before their Workload was admitted, so they ran without quota
  (kubernetes-sigs/kueue#16401, fixed in v0.19.7). A member recreates the set instead (delete, then create:
  the new Workload queues like any other).
Both checks stand aside for the cluster's own controllers and Kueue (scheduler.identities.trusted).
"""

from __future__ import annotations

from typing import Any

from scheduler.identities import trusted
from scheduler.job_kinds import CRONJOBS, enabled_kinds
from scheduler.model import SchedulingPolicy
from scheduler.vap import TEAM_NAMESPACES, rule, validating, validation

PARALLELISM = "gpufleet-kueue-job-parallelism"
ROLLING = "gpufleet-kueue-rolling-updates"
JOBS = ("batch", "jobs")
# Kind -> the CEL path of what a rolling update follows (its pod templates).
ROLLED: dict[tuple[str, str], str] = {
    ("apps", "statefulsets"): "spec.template",
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): "spec.leaderWorkerTemplate",
}
# Kind -> the CEL path of its Job spec (a CronJob's Jobs are made by a trusted controller from its template, so
# the template is checked when the member writes it).
JOB_SPECS: dict[tuple[str, str], str] = {JOBS: "object.spec", CRONJOBS: "object.spec.jobTemplate.spec"}


def at_most_completions(spec: str) -> str:
    return f"!has({spec}.completions) || !has({spec}.parallelism) || {spec}.parallelism <= {spec}.completions"


def kueue_gap_policies(policy: SchedulingPolicy) -> list[dict[str, Any]]:
    """The policies for the kinds the stack enables (none for a kind Kueue does not manage here)."""
    kinds = set(enabled_kinds())
    by = trusted(policy)
    out: list[dict[str, Any]] = []
    if JOBS in kinds:
        for (group, resource), spec in JOB_SPECS.items():
            out += validating(
                f"{PARALLELISM}-{resource}",
                [rule(group, [resource], ["CREATE", "UPDATE"])],
                TEAM_NAMESPACES,
                [
                    validation(
                        f"{by} || {at_most_completions(spec)}",
                        f"a {resource[:-1]}'s Job in a team namespace asks at most `completions` pods at once (set "
                        "parallelism <= completions): with more, the Kueue this cluster runs can admit other jobs "
                        "beyond the team's quota",
                    )
                ],
            )
    for (group, resource), path in ROLLED.items():
        if (group, resource) not in kinds:
            continue
        out += validating(
            f"{ROLLING}-{resource}",
            [rule(group, [resource], ["UPDATE"])],
            TEAM_NAMESPACES,
            [
                validation(
                    f"{by} || object.{path} == oldObject.{path}",
                    f"the pod template of a {resource[:-1]} in a team namespace does not change once it exists: the "
                    "Kueue this cluster runs starts a rolling update's pods before admitting them; delete the set "
                    "and create it again",
                )
            ],
        )
    return out
