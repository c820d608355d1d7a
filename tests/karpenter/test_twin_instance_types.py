"""What the twin's real Karpenter is given instead of AWS: the kwok provider's instance types, the NodePools
pointed at KWOKNodeClasses, the stack's feature gates (`twin.karpenter_objects`), checked against the catalog
and the stack's own NodePools."""

from __future__ import annotations

import copy

from infra import catalog
from infra.aws.karpenter.pools import node_pool
from infra.pools import karpenter_pools, zones
from infra.stackfile import load_stack
from tests.conftest import ROOT
from twin.karpenter_objects import (
    CLASS_HASH,
    feature_gates,
    instance_types,
    registration_delay,
    twin_karpenter_objects,
    twin_node_pool,
)

SPEC = load_stack(ROOT / "Pulumi.example-karpenter.yaml")
POOLS = {p.name: p for p in karpenter_pools(SPEC)}


def _offers(entry: dict[str, object]) -> dict[tuple[str, str], float]:
    out = {}
    for offering in entry["offerings"]:  # type: ignore[attr-defined]
        req = {r["key"]: r["values"] for r in offering["Requirements"]}
        out[(req["karpenter.sh/capacity-type"][0], req["topology.kubernetes.io/zone"][0])] = offering["Price"]
    return out


def test_each_instance_type_has_the_catalog_size_and_the_pools_gpus() -> None:
    types = {t["name"]: t for t in instance_types(SPEC)}
    # a10g-spot's three sizes and l40s-infer's two; h100-train is a capacity block only (no kwok offering).
    assert set(types) == {"g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g6e.12xlarge", "g6e.24xlarge"}
    for name, entry in types.items():
        itype = catalog.CATALOG[name]
        assert entry["resources"]["cpu"] == str(itype.vcpus)
        assert entry["resources"]["memory"] == f"{itype.memory_gib}Gi"
        assert entry["resources"]["nvidia.com/gpu"] == str(itype.gpus)
        assert entry["architecture"] == "amd64" and entry["operatingSystems"] == ["linux"]


def test_offerings_follow_the_pools_zones_and_capacity_types_with_spot_cheaper() -> None:
    spot = {t["name"]: _offers(t) for t in instance_types(SPEC)}["g5.4xlarge"]
    a10g = POOLS["a10g-spot"]
    assert {z for _, z in spot} == set(zones(SPEC, a10g)) == {"us-east-1b", "us-east-1c"}
    assert {c for c, _ in spot} == {"spot", "on-demand"}
    for zone in zones(SPEC, a10g):
        assert (
            spot[("spot", zone)] < spot[("on-demand", zone)] == catalog.CATALOG["g5.4xlarge"].price_per_hour
        )
    infer = {t["name"]: _offers(t) for t in instance_types(SPEC)}["g6e.12xlarge"]
    assert {c for c, _ in infer} == {"on-demand"}  # its ODCR ("reserved") has no kwok offering


def test_an_efa_pool_offers_its_interfaces() -> None:
    variant = SPEC.model_copy(
        update={
            "node_pools": [
                p.model_copy(update={"capacity_type": "ON_DEMAND", "capacity_reservation_id": None})
                if p.name == "h100-train"
                else p
                for p in SPEC.node_pools
            ]
        }
    )
    p5 = {t["name"]: t for t in instance_types(variant)}["p5.48xlarge"]
    assert p5["resources"]["vpc.amazonaws.com/efa"] == str(catalog.CATALOG["p5.48xlarge"].efa_interfaces)
    assert {z for _, z in _offers(p5)} == {"us-east-1a"}


def test_the_twin_nodepool_is_the_stacks_but_for_its_class() -> None:
    for pool in POOLS.values():
        deployed, twin = node_pool(SPEC, pool), twin_node_pool(SPEC, pool)
        assert twin["spec"]["template"]["spec"]["nodeClassRef"]["kind"] == "KWOKNodeClass"
        stripped = copy.deepcopy(twin)
        del stripped["spec"]["template"]["metadata"]["annotations"]
        stripped["spec"]["template"]["spec"]["nodeClassRef"] = deployed["spec"]["template"]["spec"][
            "nodeClassRef"
        ]
        assert stripped == deployed


def test_an_ami_release_changes_the_template_and_a_budget_does_not() -> None:
    """An EC2NodeClass change reaches the twin's Karpenter as a template change (drift); a disruption budget
    is not part of the template hash (Karpenter's `hash:"ignore"`), and changes nothing here either."""
    pool = POOLS["a10g-spot"]
    before = twin_node_pool(SPEC, pool)["spec"]["template"]
    bumped = SPEC.model_copy(
        update={"versions": SPEC.versions.model_copy(update={"al2023_nvidia_ami_release": "1.36.4-20991231"})}
    )
    after = twin_node_pool(bumped, pool)["spec"]["template"]
    assert before["metadata"]["annotations"][CLASS_HASH] != after["metadata"]["annotations"][CLASS_HASH]
    settings = pool.karpenter.model_copy(update={"budgets": []})  # type: ignore[union-attr]
    rebudgeted = twin_node_pool(SPEC, pool.model_copy(update={"karpenter": settings}))["spec"]["template"]
    assert rebudgeted == before


def test_objects_come_in_apply_order_and_boot_times_scale() -> None:
    kinds = [o["kind"] for o in twin_karpenter_objects(SPEC, 0.01)]
    assert kinds == ["KWOKNodeClass"] * 3 + ["NodePool"] * 3 + [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    assert registration_delay(POOLS["h100-train"]) == "840s"  # a p5's 15 minutes, under Karpenter's timeout
    assert registration_delay(POOLS["a10g-spot"], 0.01) == "6s"
    assert registration_delay(POOLS["a10g-spot"], 0.0001) == "1s"


def test_feature_gates_are_the_stacks() -> None:
    assert feature_gates(SPEC) == "NodeRepair=true,ReservedCapacity=true"
