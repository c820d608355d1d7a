"""Every NodePool and EC2NodeClass the toolkit builds passes the shared Karpenter v1.14.1 CRDs, CEL included.

Schemas: aws/karpenter-provider-aws `pkg/apis/crds/karpenter.sh_nodepools.yaml` and
`karpenter.k8s.aws_ec2nodeclasses.yaml` at v1.14.1, made strict (unknown fields rejected) and with their
`x-kubernetes-validations` evaluated by cel-python (scheduler.validation). The policy that marks training
pods is a core object: `kubernetes-validate --strict` for 1.36, where MutatingAdmissionPolicy is GA.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest

from infra.aws.karpenter.disruption import do_not_disrupt_policy, match_expression
from infra.aws.karpenter.pools import karpenter_objects, node_class, node_pool
from infra.stackfile import parse_config
from scheduler.validation import cel_problems, core_problems, crd_problems
from tests.karpenter.conftest import AWS_STACKS, as_karpenter, example_config, karpenter_example


def problems(obj: dict[str, Any], schemas: dict[Any, Any]) -> list[str]:
    return crd_problems(obj, schemas) + cel_problems(obj, schemas)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_nodepool_and_nodeclass_of_every_example_stack_validates(
    stack: str, karpenter_schemas: dict
) -> None:
    spec = karpenter_example(stack)
    objects = karpenter_objects(spec)
    assert {o["kind"] for o in objects} == {"NodePool", "EC2NodeClass"}
    found = [p for o in objects for p in problems(o, karpenter_schemas)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_do_not_disrupt_policy_is_a_valid_1_36_object(stack: str) -> None:
    objects = do_not_disrupt_policy(karpenter_example(stack))
    assert [o["kind"] for o in objects] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    found = [p for o in objects for p in core_problems(o, "1.36")]
    assert found == [], "\n".join(found)


def test_validation_rejects_what_the_api_server_would(karpenter_schemas: dict) -> None:
    """The check is real: the CRDs' CEL rules catch an unsupported alias family, a label in Karpenter's
    restricted domain, two efa-only devices on one card, and a missing primary interface."""
    spec = karpenter_example("example-karpenter")
    pool = spec.pool("h100-train")
    nc = node_class(spec, pool)
    bad_alias = copy.deepcopy(nc)
    bad_alias["spec"]["amiSelectorTerms"] = [{"alias": "ubuntu@v20260930"}]
    assert any("family is not supported" in p for p in problems(bad_alias, karpenter_schemas))
    two_efa = copy.deepcopy(nc)
    two_efa["spec"]["networkInterfaces"].append(
        {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}
    )
    assert any("at most one efa device per network card" in p for p in problems(two_efa, karpenter_schemas))
    no_primary = copy.deepcopy(nc)
    no_primary["spec"]["networkInterfaces"] = no_primary["spec"]["networkInterfaces"][1:]
    assert any("primary interface" in p for p in problems(no_primary, karpenter_schemas))
    np = node_pool(spec, pool)
    restricted = copy.deepcopy(np)
    restricted["spec"]["template"]["metadata"]["labels"]["karpenter.sh/team"] = "x"
    assert any(
        'label domain "karpenter.sh" is restricted' in p for p in problems(restricted, karpenter_schemas)
    )
    typo = copy.deepcopy(np)
    typo["spec"]["disruption"]["consolidationPolicy"] = "WhenIdle"
    assert any("consolidationPolicy" in p for p in problems(typo, karpenter_schemas))


def _matches(expression: str, pod_spec: dict[str, Any]) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return bool(program.evaluate({"object": celpy.json_to_cel({"spec": pod_spec})}))


def test_do_not_disrupt_matches_only_pods_bound_for_training_pools() -> None:
    """Kueue injects a flavor's nodeLabels into the admitted pod's nodeSelector (Kueue docs, "Resource
    Flavor": nodeLabels); the policy's match condition reads exactly that label, gpufleet.io/pool."""
    spec = karpenter_example("example-karpenter")
    (policy, _) = do_not_disrupt_policy(spec)
    expression = policy["spec"]["matchConditions"][0]["expression"]
    assert expression == match_expression(["h100-train", "a10g-spot"])
    assert _matches(expression, {"nodeSelector": {"gpufleet.io/pool": "h100-train"}})
    assert _matches(expression, {"nodeSelector": {"gpufleet.io/pool": "a10g-spot", "x": "y"}})
    assert not _matches(expression, {"nodeSelector": {"gpufleet.io/pool": "l40s-infer"}})  # inference
    assert not _matches(expression, {"nodeSelector": {"kubernetes.io/os": "linux"}})
    assert not _matches(expression, {"containers": []})
    mutation = policy["spec"]["mutations"][0]["applyConfiguration"]["expression"]
    assert '"karpenter.sh/do-not-disrupt": "true"' in mutation


@pytest.mark.parametrize("capacity", ["ON_DEMAND", "SPOT"])
def test_an_efa_pool_is_pinned_to_its_zone_with_a_cluster_placement_group(
    capacity: str, karpenter_schemas: dict
) -> None:
    """EC2NodeClass `spec.placementGroupSelector`: a "cluster" placement group keeps instances in one zone,
    close together, e.g. for EFA (website/content/en/docs/concepts/nodeclasses.md @v1.14.1); EC2 User Guide
    "Placement groups": a cluster placement group is in a single Availability Zone. An On-Demand or Spot EFA
    pool gets its `availabilityZone` only, not every cluster zone, and a placement group; the objects pass the
    CRDs (schema and CEL)."""
    config = as_karpenter(example_config("example-karpenter"))
    config["gpufleet:nodePools"].append(
        {
            "name": "p5-od",
            "instanceType": "p5.48xlarge",
            "capacityType": capacity,
            "efa": True,
            "availabilityZone": "us-east-1b",
            "maxSize": 2,
        }
    )
    spec = parse_config(config, "efa")
    pool = spec.pool("p5-od")
    nc, np = node_class(spec, pool), node_pool(spec, pool)
    (zone,) = [
        r for r in np["spec"]["template"]["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"
    ]
    assert zone["values"] == ["us-east-1b"]
    assert nc["spec"]["placementGroupSelector"] == {"name": "gpufleet-karpenter-p5-od"}
    assert [p for o in (nc, np) for p in problems(o, karpenter_schemas)] == []
    # A capacity block fixes where its instances are: no placement group there.
    assert "placementGroupSelector" not in node_class(spec, spec.pool("h100-train"))["spec"]
