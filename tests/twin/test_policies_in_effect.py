"""The twin says it is up only once the stack's admission policies act (`twin.policies_in_effect`): the API
server applies a new policy only after its policy source, once a second, rebuilds its set from what its
informers have seen, so a request made right after `pulumi up` can pass a policy that is already stored."""

from __future__ import annotations

from tests.twin.kube import Kube, name
from twin.policies_in_effect import PROBE_LABEL, await_policies, probe_acts, probe_policy, resource


def held_back_by(kube: Kube, kind: str) -> None:
    """A policy of `kind` created now acts on the very first request made after `await_policies` returns."""
    policy = name("held")
    kube.apply(probe_policy(kind, policy))
    try:
        assert kind in await_policies(kube)
        assert probe_acts(kube, kind, policy), (
            f"the {kind} {policy} did not act on the first request after the wait"
        )
    finally:
        for each in (f"{kind}Binding", kind):
            kube.attempt("delete", resource(each), policy, "--ignore-not-found")


def no_probe_left(kube: Kube) -> None:
    for kind in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"):
        for each in (kind, f"{kind}Binding"):
            got = kube.attempt("get", resource(each), "-l", PROBE_LABEL, "-o", "name")
            assert not got.out.strip(), f"the twin left its probe {each}: {got.out}"


def test_a_validating_policy_refuses_the_first_request_after_the_wait(metal_twin: Kube) -> None:
    """On 1.35 (the metal stack's minor) the stack deploys ValidatingAdmissionPolicies only; the twin's probe is
    gone once it is up, and a policy made later refuses at once once the wait returns."""
    no_probe_left(metal_twin)
    assert metal_twin.items("validatingadmissionpolicies"), "the metal stack deploys validating policies"
    held_back_by(metal_twin, "ValidatingAdmissionPolicy")
