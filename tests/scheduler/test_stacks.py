"""The example stacks end to end: spec -> infra's adapter -> compile -> upstream schemas and references."""

from __future__ import annotations

from pathlib import Path

from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from scheduler import compile, pool_node_labels
from scheduler.references import reference_problems
from scheduler.validation import validate_objects


def test_example_stack_compiles_to_valid_consistent_objects(
    example_spec: ClusterSpec, shared_dir: Path
) -> None:
    policy, pools = scheduler_inputs(example_spec)
    objects = compile(policy, pools)
    assert validate_objects(objects, shared_dir / "crds", policy.kubernetes_version) == []
    assert reference_problems(objects, policy, pools) == []
    queues_per_team = 2 + any(p.topology_levels for p in pools)  # GPU, CPU and a topology queue
    assert (
        len([o for o in objects if o["kind"] == "ClusterQueue"]) == len(example_spec.teams) * queues_per_team
    )
    for pool in pools:  # the node groups carry exactly the labels the flavors and device plugin select on
        assert pool_node_labels(pool).items() <= pool.labels.items()


def test_topology_pools_from_the_spec(shared_dir: Path) -> None:
    """EFA pools on EKS use the EKS network-layer labels (EKS user guide, "Place distributed AI/ML workloads
    with network topology labels"); an existing cluster's pool uses the labels its spec names. Both compile to
    a Topology valid under Kueue v0.19.2's CRD (schema and CEL: unique levels, host name last)."""
    from tests.conftest import load_example

    prod = load_example("example-prod")
    _, pools = scheduler_inputs(prod)
    h100 = next(p for p in pools if p.name == "h100-train")
    assert h100.topology_levels == (
        "topology.k8s.aws/network-node-layer-1",
        "topology.k8s.aws/network-node-layer-2",
        "topology.k8s.aws/network-node-layer-3",
        "kubernetes.io/hostname",
    )
    assert h100.efa_per_node == 32  # p5.48xlarge
    assert [p.name for p in pools if p.topology_levels] == ["h100-train"]

    metal = load_example("metal")
    racks = ["example.com/block", "example.com/rack"]
    h100_pool = metal.node_pools[0].model_copy(update={"topology_labels": racks})
    spec = metal.model_copy(update={"node_pools": [h100_pool, *metal.node_pools[1:]]})
    policy, pools = scheduler_inputs(spec)
    objects = compile(policy, pools)
    (topology,) = [o for o in objects if o["kind"] == "Topology"]
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [*racks, "kubernetes.io/hostname"]
    assert validate_objects(objects, shared_dir / "crds", policy.kubernetes_version) == []
    assert reference_problems(objects, policy, pools) == []
    broken = [dict(topology, spec={"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "x"}]})]
    assert validate_objects(broken, shared_dir / "crds", policy.kubernetes_version) != []


def test_provisioning_request_crd_follows_the_autoscaler_pin() -> None:
    """The CRD comes from kubernetes/autoscaler at the tag of the autoscaler image the stack runs
    (cluster-autoscaler-<version>, path cluster-autoscaler/apis/config/crd/...provisioningrequests.yaml)."""
    from tests.conftest import load_example

    prod = load_example("example-prod")
    off = prod.model_copy(
        update={"scheduling": prod.scheduling.model_copy(update={"provisioning_requests": False})}
    )
    assert scheduler_inputs(off)[0].provisioning_request_crd == ""
    on = prod.model_copy(
        update={"scheduling": prod.scheduling.model_copy(update={"provisioning_requests": True})}
    )
    url = scheduler_inputs(on)[0].provisioning_request_crd
    assert url == (
        "https://raw.githubusercontent.com/kubernetes/autoscaler/cluster-autoscaler-1.35.2/"
        "cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml"
    )
    assert prod.versions.cluster_autoscaler_image == "v1.35.2"


def test_plan_notes_carry_the_sharing_pool_warning() -> None:
    """`invoke plan` shows scheduler.checks.warnings; the prod example's MIG pool (3.4 cores per 1g.10gb slice)
    holds the documented MIG job (3 cores), metal has no sharing pool too small."""
    from infra.plan import build_plan
    from tests.conftest import load_example

    assert not [n for n in build_plan(load_example("example-prod")).notes if "slices" in n]  # 3.4 >= 3 cores
    assert not [n for n in build_plan(load_example("metal")).notes if "slices" in n]
