"""The newest minor an existing cluster may run (Kubernetes 1.37, `invoke twin --stack metal --minor 1.37`): the
metal stack's policy, compiled for 1.37, is accepted by a 1.37.2 API server, and a team's GPU job is admitted
by Kueue v0.19.2 and placed by the stack's gpu-binpack scheduler (kube-scheduler v1.37.2). No example stack
runs 1.37, so this module is the e2e tier's one 1.37 twin."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from infra.versions import PER_MINOR
from tests.support import eventually
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube, job, name
from tests.twin.test_policies_in_effect import held_back_by, no_probe_left
from tests.twin.test_team_rules import condition, pods_of, workload_of

MINOR = "1.37"


@pytest.fixture(scope="module")
def metal_137(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    twin = start_twin(tmp_path_factory, "metal", minor=MINOR)
    yield Kube.of(twin)
    twin.stop()


def test_on_1_37_the_policy_is_accepted_and_a_gpu_job_is_admitted_and_placed(metal_137: Kube) -> None:
    """The policy's admission objects are served as deployed (admissionregistration.k8s.io/v1, the mutating ones
    included), and a GPU job that names neither a queue nor a scheduler is routed, admitted and bound to an
    H100 host by gpu-binpack: the 1.37 API server runs the MutatingAdmissionPolicies that fill both in."""
    server = json.loads(metal_137.ok("version", "-o", "json"))["serverVersion"]["gitVersion"]
    assert server == PER_MINOR[MINOR].kubernetes_patch
    validating = {p["metadata"]["name"] for p in metal_137.items("validatingadmissionpolicies")}
    mutating = {p["metadata"]["name"] for p in metal_137.items("mutatingadmissionpolicies")}
    assert "gpufleet-team-scheduler-name" in mutating
    assert any(n.startswith("gpufleet-") for n in validating)
    member = metal_137.as_member(("vision-team",))
    train = name("train")
    created = member.create(job(train, "vision", {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1}))
    assert created.ok, created.err
    try:
        eventually(lambda: condition(workload_of(metal_137, "vision", train), "Admitted"), "admission", 120)
        placed = eventually(
            lambda: [p for p in pods_of(metal_137, "vision", train) if p["spec"].get("nodeName")],
            "the pod bound",
            120,
        )
        (pod,) = placed
        assert pod["spec"]["schedulerName"] == "gpu-binpack"
        node = metal_137.get("node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"]["gpufleet.io/pool"] == "h100"
    finally:
        member.delete("job", train, "vision")


def test_on_1_37_a_mutating_policy_acts_on_the_first_request_after_the_wait(metal_137: Kube) -> None:
    """The twin waited for the stack's MutatingAdmissionPolicies (served from 1.36) as for its validating ones,
    left no probe, and a mutating policy made later labels the first object created after the wait."""
    no_probe_left(metal_137)
    held_back_by(metal_137, "MutatingAdmissionPolicy")
