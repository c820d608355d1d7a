"""Which flavors Kueue can give a pod set under the compiled ClusterQueues (model: tests/scheduler/kueue_model.py,
after Kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler import compile
from scheduler.checks import CPU_FLAVOR, GPU_CORES_FLAVOR
from scheduler.kueue import CPU_SUFFIX
from scheduler.kueue_config import manager_config
from scheduler.labels import EFA_RESOURCE, POOL_LABEL
from tests.scheduler.examples import PROD, PROD_POOLS
from tests.scheduler.kueue_model import Cluster, PodSet, assign, node_selector

GiB = 2**30
POOLS = [p.name for p in PROD_POOLS]
TOPOLOGY_LEVEL = "topology.k8s.aws/network-node-layer-3"


def cluster(objects: list[dict[str, Any]] | None = None, pools: tuple[Any, ...] = PROD_POOLS) -> Cluster:
    excluded = tuple(manager_config(PROD)["resources"]["excludeResourcePrefixes"])
    return Cluster(objects if objects is not None else compile(PROD, pools), excluded)


def exhaust_cpu(c: Cluster) -> None:
    """Every queue's cpu-only flavor fully used: no team has CPU left, nothing is lendable."""
    for cq in c.by_kind("ClusterQueue").values():
        for group in cq["spec"]["resourceGroups"]:
            for entry in group["flavors"]:
                for res in entry["resources"]:
                    if entry["name"] == CPU_FLAVOR:
                        q = res["nominalQuota"]
                        c.usage[(cq["metadata"]["name"], CPU_FLAVOR, res["name"])] = (
                            float(str(q).removesuffix("Gi")) * GiB if str(q).endswith("Gi") else float(q)
                        )


CPU_ONLY = PodSet({"cpu": 64, "memory": 256 * GiB})


@pytest.mark.parametrize("team", [t.name for t in PROD.teams])
@pytest.mark.parametrize("exhausted", [False, True])
def test_cpu_only_work_never_gets_a_gpu_pool_flavor(team: str, exhausted: bool) -> None:
    """The CPU queue holds only `cpu-only`, so a pod set without GPU requests is given it (possibly by
    borrowing) or waits; a GPU pool's flavor, with its node selector and taint toleration, is never a
    candidate however short the team is of CPU."""
    c = cluster()
    if exhausted:
        exhaust_cpu(c)
    result = assign(c, team + CPU_SUFFIX, CPU_ONLY)  # the admission policies route it to the cpu queue
    if exhausted:
        assert isinstance(result, str)  # waits for CPU instead of spilling onto a GPU node
    else:
        assert result == {"cpu": CPU_FLAVOR, "memory": CPU_FLAVOR}
        assert node_selector(c, result, CPU_ONLY) == {}


def test_the_model_sees_the_spill_of_a_single_resource_group() -> None:
    """The layout before the split (cpu-only and GPU flavors in one group, TryNextFlavor): once CPU-only quota
    runs out, Kueue picks the next flavor that still has cpu, a GPU pool. The model must see that."""
    objects = compile(PROD, PROD_POOLS)
    merged = copy.deepcopy(objects)
    for cq in [o for o in merged if o["kind"] == "ClusterQueue" and len(o["spec"]["resourceGroups"]) == 2]:
        cpu_group, gpu_group = cq["spec"]["resourceGroups"]
        covered = cpu_group["coveredResources"] + gpu_group["coveredResources"]
        zeros = [{"name": n, "nominalQuota": 0} for n in gpu_group["coveredResources"]]
        flavors = [{"name": CPU_FLAVOR, "resources": cpu_group["flavors"][0]["resources"] + zeros}]
        for entry in gpu_group["flavors"]:
            cpu = [{"name": "cpu", "nominalQuota": 192}, {"name": "memory", "nominalQuota": "2048Gi"}]
            flavors.append({"name": entry["name"], "resources": cpu + entry["resources"]})
        cq["spec"]["resourceGroups"] = [{"coveredResources": covered, "flavors": flavors}]
    c = cluster(merged)
    exhaust_cpu(c)
    result = assign(c, "research", CPU_ONLY)
    assert isinstance(result, dict) and result["cpu"] in POOLS


@pytest.mark.parametrize(
    ("team", "requests", "selector", "pool"),
    [
        ("research", {"nvidia.com/gpu": 4, "cpu": 24, "memory": 96 * GiB}, {}, "l40s-infer"),
        ("research", {"nvidia.com/gpu": 4, "cpu": 32}, {POOL_LABEL: "l40s-infer"}, "l40s-infer"),
        ("batch", {"nvidia.com/gpu.shared": 1, "cpu": 1, "memory": 4 * GiB}, {}, "a10g-batch"),
        ("batch", {"nvidia.com/mig-1g.10gb": 1, "cpu": 3}, {}, "h100-mig"),
    ],
)
def test_gpu_shapes_get_their_pool_and_cpu_only_for_their_cores(
    team: str, requests: dict[str, float], selector: dict[str, str], pool: str
) -> None:
    """Whole, shared (time-sliced) and MIG GPUs each land on the pool exposing that resource; the cores come
    from `gpu-cores`, which adds no node label, so the pod's node selector is exactly its pool's."""
    c = cluster()
    pod = PodSet(requests, selector)
    result = assign(c, team, pod)
    assert isinstance(result, dict)
    gpu = next(n for n in requests if n.startswith("nvidia.com/"))
    assert result[gpu] == pool
    assert result["cpu"] == GPU_CORES_FLAVOR
    assert node_selector(c, result, pod) == {POOL_LABEL: pool}


def test_efa_is_quota_on_efa_pools_and_node_local_resources_are_not_metered() -> None:
    """`vpc.amazonaws.com/efa` is covered (BlockUndeclared would otherwise refuse the pod) with quota only on
    the EFA pool; ephemeral-storage and hugepages-* are dropped by excludeResourcePrefixes; an undeclared
    extended resource is still refused."""
    c = cluster()
    pod = PodSet(
        {
            "nvidia.com/gpu": 8,
            EFA_RESOURCE: 32,
            "cpu": 96,
            "ephemeral-storage": 500 * GiB,
            "hugepages-2Mi": 2 * GiB,
        }
    )
    result = assign(c, "llm-training-topology", pod)
    assert isinstance(result, dict) and result[EFA_RESOURCE] == "h100-train"
    assert "ephemeral-storage" not in result and "hugepages-2Mi" not in result
    l40s = PodSet({"nvidia.com/gpu": 1, EFA_RESOURCE: 1}, {POOL_LABEL: "l40s-infer"})
    assert isinstance(assign(c, "research", l40s), str)  # l40s-infer has no EFA
    fpga = PodSet({"cpu": 1, "example.com/fpga": 1})
    assert assign(c, "research", fpga) == "resource example.com/fpga unavailable in ClusterQueue"
    llm = c.by_kind("ClusterQueue")["llm-training-topology"]["spec"]["resourceGroups"][0]
    quota = {e["name"]: {r["name"]: r["nominalQuota"] for r in e["resources"]} for e in llm["flavors"]}
    assert quota["h100-train"][EFA_RESOURCE] == 24 * 32 // 8  # 24 of 8-GPU nodes with 32 interfaces each
    research = c.by_kind("ClusterQueue")["research"]["spec"]["resourceGroups"][1]
    quota = {e["name"]: {r["name"]: r["nominalQuota"] for r in e["resources"]} for e in research["flavors"]}
    assert quota["l40s-infer"][EFA_RESOURCE] == 0


def test_topology_pools_are_served_by_the_topology_queue_only() -> None:
    """A gang asking for a topology level fails in the default queue, whose CPU group has `cpu-only`
    without a topology (Kueue: "Flavor cpu-only does not support TopologyAwareScheduling"); in the topology
    queue every flavor has one, so TAS is implied for every pod set, a CPU-only launcher included, which is
    placed inside the pool (documented)."""
    c = cluster()
    gang = PodSet({"nvidia.com/gpu": 16, "cpu": 192, EFA_RESOURCE: 64}, topology=TOPOLOGY_LEVEL)
    assert isinstance(assign(c, "llm-training", gang), str)
    result = assign(c, "llm-training-topology", gang)
    assert isinstance(result, dict) and set(result.values()) == {"h100-train"}
    assert node_selector(c, result, gang) == {POOL_LABEL: "h100-train"}
    launcher = PodSet({"cpu": 2, "memory": 4 * GiB})
    assert assign(c, "llm-training-topology", launcher) == {"cpu": "h100-train", "memory": "h100-train"}
    topology = c.by_kind("Topology")["h100-train"]["spec"]["levels"]
    assert TOPOLOGY_LEVEL in [level["nodeLabel"] for level in topology]
    assert c.by_kind("ResourceFlavor")["h100-train"]["spec"]["topologyName"] == "h100-train"
    # Ordinary queues never list a topology flavor, so nothing there needs a topology request.
    for cq in c.by_kind("ClusterQueue").values():
        names = [f["name"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]]
        assert ("h100-train" in names) is cq["metadata"]["name"].endswith("-topology")
