"""A team member's access, as the API server decides it: impersonated with only their team's group (the group an
EKS access entry of `teams[].roleArns`, or an identity provider's groups claim, gives them), on the metal
twin's real API server with the stack's RBAC deployed. metal: teams vision (group vision-team) and nlp."""

from __future__ import annotations

from tests.twin.kube import Kube

WORKLOADS = "workloads.kueue.x-k8s.io"


def test_a_member_reads_their_own_queue_and_not_another_teams_workloads(metal_twin: Kube) -> None:
    vision = metal_twin.as_member(("vision-team",))
    assert "default" in vision.ok("get", "localqueues.kueue.x-k8s.io", "-n", "vision", "-o", "name")
    vision.ok("get", WORKLOADS, "-n", "vision")
    vision.ok("get", "clusterqueues.kueue.x-k8s.io", "vision")
    refused = vision.attempt("get", WORKLOADS, "-n", "nlp")
    assert not refused.ok and "forbidden" in refused.err.lower(), refused.err
    assert vision.attempt("get", "pods", "-n", "nlp").ok is False
    assert vision.ok("auth", "can-i", "create", "events", "-n", "vision").strip() == "yes"
    assert vision.attempt("auth", "can-i", "create", "events", "-n", "nlp").out.strip() == "no"
