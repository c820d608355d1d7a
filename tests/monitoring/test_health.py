"""Self-healing: NVSentinel's values, and why Kueue's flavors never place pods on a quarantined node."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from infra.gpu_stack.gpu_operator import gpu_operator_values
from infra.monitoring.health import installs_nvsentinel, nvsentinel_values
from infra.scheduling import scheduler_inputs
from scheduler import compile
from tests.conftest import EXAMPLE_STACKS, load_example
from tests.monitoring.conftest import ops_spec

CORDON = {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"}


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Kubernetes' rule (concepts/scheduling-eviction/taint-and-toleration): an empty key with `Exists` matches
    every taint; otherwise keys must be equal, effects equal (or the toleration's empty), and the value equal
    for `Equal` (the default operator)."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    return toleration.get("operator") == "Exists" or toleration.get("value", "") == taint.get("value", "")


def _flavors(stack: str) -> tuple[set[str], list[list[dict[str, Any]]]]:
    """The pools' own taint keys, and every flavor's tolerations."""
    policy, pools = scheduler_inputs(load_example(stack))
    flavors = [o for o in compile(policy, pools) if o["kind"] == "ResourceFlavor"]
    return {t["key"] for p in pools for t in p.taints}, [f["spec"].get("tolerations", []) for f in flavors]


FLAVORS = {stack: _flavors(stack) for stack in EXAMPLE_STACKS}


def test_the_toleration_rule_is_the_kubernetes_one() -> None:
    assert tolerates({"operator": "Exists"}, CORDON)  # tolerate-everything: what flavors must never carry
    assert tolerates({"key": "a", "operator": "Exists"}, {"key": "a", "value": "x", "effect": "NoSchedule"})
    assert not tolerates({"key": "a", "value": "y"}, {"key": "a", "value": "x", "effect": "NoSchedule"})


@given(
    key=st.from_regex(r"[a-z]{1,12}(\.[a-z]{1,8})?/[a-z-]{1,20}", fullmatch=True),
    value=st.text(alphabet="abcdefgh-", max_size=10),
    effect=st.sampled_from(["NoSchedule", "NoExecute"]),
)
def test_no_flavor_tolerates_a_quarantine_taint(key: str, value: str, effect: str) -> None:
    """Kueue copies a flavor's tolerations into the admitted pods (ResourceFlavor spec.tolerations); ours name
    only the GPU taint and the pool's own taints, so a quarantine taint (NVSentinel's configured key, or the
    cordon taint `node.kubernetes.io/unschedulable`) keeps the pods off the node whatever its key."""
    for own, flavors in FLAVORS.values():
        for tolerations in flavors:
            assert all(t.get("key") for t in tolerations), "a key-less toleration tolerates every taint"
            for taint in (CORDON, {"key": key, "value": value, "effect": effect}):
                if taint["key"] not in own:
                    assert not any(tolerates(t, taint) for t in tolerations)


def test_nvsentinel_on_existing_clusters_only_and_drain_when_asked() -> None:
    metal = load_example("metal")
    assert installs_nvsentinel(metal) and not installs_nvsentinel(load_example("example-prod"))
    assert nvsentinel_values(metal)["global"] == {
        "gpuHealthMonitor": {"enabled": True},
        "faultQuarantine": {"enabled": True},
        "nodeDrainer": {"enabled": False},
    }
    drain = metal.model_copy(
        update={
            "cluster": metal.cluster.model_copy(
                update={"monitoring": metal.cluster.monitoring.model_copy(update={"self_healing": "drain"})}
            )
        }
    )
    assert nvsentinel_values(drain)["global"]["nodeDrainer"] == {"enabled": True}
    # NVSentinel reads DCGM as a service: the GPU operator's standalone DCGM, only where NVSentinel runs.
    assert gpu_operator_values(metal)["dcgm"] == {"enabled": True}
    assert "dcgm" not in gpu_operator_values(ops_spec())
