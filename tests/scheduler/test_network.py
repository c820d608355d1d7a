"""Team namespaces' NetworkPolicies, evaluated with the Kubernetes NetworkPolicy semantics.

From the Kubernetes docs ("Network Policies", "The two sorts of pod isolation"): a pod is isolated for ingress
once any policy with `policyTypes: [Ingress]` selects it; then a connection is allowed only if some such
policy's ingress rule has a `from` peer matching the source (a `podSelector` alone means pods of the policy's
own namespace, a `namespaceSelector` alone means any pod of matching namespaces); policies are additive.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import compile
from tests.scheduler.examples import PROD, PROD_POOLS
from tests.scheduler.helpers import of_kind, selector_matches


def allowed(
    policies: list[dict[str, Any]],
    src_ns: str,
    src_labels: dict[str, str],
    dst_ns: str,
    dst_labels: dict[str, str] | None = None,
    port: int = 8080,
) -> bool:
    selecting = [
        p for p in policies
        if p["metadata"]["namespace"] == dst_ns and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and selector_matches(p["spec"]["podSelector"], dst_labels or {})
    ]  # fmt: skip
    if not selecting:
        return True  # not isolated
    ns_labels = {"kubernetes.io/metadata.name": src_ns}
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports):
                continue
            for peer in rule.get("from", []):
                if "namespaceSelector" in peer:
                    ns_ok = selector_matches(peer["namespaceSelector"], ns_labels)
                else:
                    ns_ok = src_ns == dst_ns
                pod_ok = selector_matches(peer.get("podSelector", {}), src_labels)
                if ns_ok and pod_ok:
                    return True
    return False


@pytest.mark.parametrize(
    ("source", "ok"),
    [
        ("team-llm", True),  # its own namespace
        ("kueue-system", False),  # Kueue never connects to pods
        ("monitoring", True),
        ("ingress", True),
        ("team-research", False),  # another team
        ("default", False),
        ("gpu-operator", False),
    ],
)
def test_team_ingress_is_denied_but_for_its_namespace_and_the_platform(source: str, ok: bool) -> None:
    policies = of_kind(compile(PROD, PROD_POOLS), "NetworkPolicy")
    assert allowed(policies, source, {"app": "x"}, "team-llm") is ok


def test_every_team_namespace_is_isolated() -> None:
    objects = compile(PROD, PROD_POOLS)
    policies = of_kind(objects, "NetworkPolicy")
    for team in PROD.teams:
        others = [t.namespace for t in PROD.teams if t is not team]
        assert not any(allowed(policies, ns, {}, team.namespace) for ns in others)


@pytest.mark.parametrize(
    ("src_ns", "src_labels", "dst_labels", "port", "ok"),
    [
        (
            "ray-system",
            {"app.kubernetes.io/name": "kuberay-operator"},
            {"ray.io/node-type": "head"},
            8265,
            True,
        ),
        (
            "ray-system",
            {"app.kubernetes.io/name": "kuberay-operator"},
            {"ray.io/node-type": "head"},
            6379,
            False,
        ),
        (
            "ray-system",
            {"app.kubernetes.io/name": "kuberay-operator"},
            {"ray.io/node-type": "worker"},
            8265,
            False,
        ),
        ("ray-system", {"app": "other"}, {"ray.io/node-type": "head"}, 8265, False),
        (
            "team-research",
            {"app.kubernetes.io/name": "kuberay-operator"},
            {"ray.io/node-type": "head"},
            8265,
            False,
        ),
    ],
)
def test_the_kuberay_operator_reaches_ray_heads_dashboards_only(
    src_ns: str, src_labels: dict[str, str], dst_labels: dict[str, str], port: int, ok: bool
) -> None:
    """The KubeRay operator polls each head's dashboard (ray-project/kuberay v1.5.0
    ray-operator/controllers/ray/rayjob_controller.go `GetJobInfo`, direct HTTP to port 8265,
    utils/constant.go DefaultDashboardPort; head pods labelled `ray.io/node-type: head`, RayNodeTypeLabelKey;
    operator pods `app.kubernetes.io/name: kuberay-operator`, helm-chart/kuberay-operator deployment.yaml) from
    its namespace (docs.ray.io "KubeRay Operator Installation": ray-system)."""
    policies = of_kind(compile(PROD, PROD_POOLS), "NetworkPolicy")
    assert allowed(policies, src_ns, src_labels, "team-inference", dst_labels, port) is ok
