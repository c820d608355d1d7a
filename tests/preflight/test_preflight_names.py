"""Account-wide names on a new cluster, against the loopback server (moto's IAM and EKS)."""

from __future__ import annotations

from infra.pools import node_role_name
from infra.preflight import Severity, run_preflight
from infra.preflight.names import SUBJECT
from tests.conftest import load_example
from tests.preflight.fakeaws import FakeAws
from tests.preflight.test_preflight_moto import by_subject


def test_a_karpenter_node_role_another_region_holds_is_refused_on_a_new_cluster(aws: FakeAws) -> None:
    """IAM role names are account-wide: the same cluster name deployed in a second region would fail with
    EntityAlreadyExists part-way through its first `up`."""
    spec = load_example("example-karpenter")
    aws.seed_clean(spec)
    role = node_role_name(spec)
    assert SUBJECT not in by_subject(run_preflight(spec), Severity.ERROR)

    aws.seed_role(f"arn:aws:iam::123456789012:role/{role}")  # the other region's stack
    (message,) = by_subject(run_preflight(spec), Severity.ERROR)[SUBJECT]
    assert f"IAM role {role} already exists, but cluster {spec.cluster.name} does not exist" in message

    aws.seed_cluster(spec.region or "", spec.cluster.name, spec.cluster.kubernetes_version)  # its own cluster
    assert SUBJECT not in by_subject(run_preflight(spec), Severity.ERROR)
