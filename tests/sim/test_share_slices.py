"""Free GPU shares from ResourceSlices and allocated ResourceClaims (scheduler.fgd.shares), on the slices the twin
publishes for a metal stack's `dra-shares` pool (twin.dra, the NVIDIA driver's shape), and the FGD score of a
claim on them: the same score the simulator's FGD policy gives under the allocator's first-fit rule."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import yaml

from infra.stackfile import parse_config
from scheduler.dra import DRIVER, SHARES, claim_template
from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.shapes import build_shapes
from scheduler.fgd.shares import (
    free_shares,
    requested_shares,
    share_cluster,
    share_milli,
    share_scores,
    share_target,
)
from scheduler.fgd.state import ClusterState
from scheduler.sim.policies import Context, make_policy
from scheduler.sim.policies.base import Batch
from tests.conftest import ROOT
from tests.sim.tiny import cluster, workload
from twin.dra import resource_slices
from twin.nodes import twin_nodes


@pytest.fixture(scope="module")
def slices() -> list[dict[str, Any]]:
    """The metal stack on 1.36 with its L40S pool (3 hosts x 4 GPUs) at 8 shares a GPU, as the twin publishes."""
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"])
    config["gpufleet:cluster"]["kubernetesVersion"] = "1.36"
    config["gpufleet:nodePools"][1]["sharing"] = "dra-shares"
    spec = parse_config(config, "shares")
    return resource_slices(spec, twin_nodes(spec))


def allocated(name: str, node: str, device: str, shares: int | None, pod_uid: str = "") -> dict[str, Any]:
    """A claim as kube-scheduler leaves it allocated (k8s.io/api v0.36.4 resource/v1
    DeviceRequestAllocationResult: consumedCapacity per device; reservedFor the pod using it)."""
    result: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}
    if shares is not None:
        result["consumedCapacity"] = {SHARES: str(shares)}
        result["shareID"] = f"{name}-share"
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}}
    if pod_uid:
        status["reservedFor"] = [{"resource": "pods", "name": name, "uid": pod_uid}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": claim_template("vision", shares or 1)["spec"]["spec"], "status": status}  # fmt: skip


def test_an_unclaimed_pool_has_every_share_of_every_gpu_free(slices: list[dict[str, Any]]) -> None:
    shares = free_shares(slices, [])
    assert sorted(shares) == ["gpu-l40s-01", "gpu-l40s-02", "gpu-l40s-03"]
    for node, row in shares.items():
        assert row.pool == node
        assert row.devices == ("gpu-0", "gpu-1", "gpu-2", "gpu-3")
        assert row.capacity == row.free == (8, 8, 8, 8)
        assert row.per_gpu == 8


def test_allocated_claims_take_their_consumed_shares_and_a_whole_allocation_the_device(
    slices: list[dict[str, Any]],
) -> None:
    claims = [
        allocated("a", "gpu-l40s-01", "gpu-0", 2),
        allocated("b", "gpu-l40s-01", "gpu-0", 3),
        allocated("c", "gpu-l40s-02", "gpu-3", None),  # no consumedCapacity: the device taken whole
        {"metadata": {"name": "pending"}, "spec": claim_template("vision", 4)["spec"]["spec"]},
        {"status": {"allocation": {"devices": {"results": [
            {"driver": "other.example.com", "pool": "gpu-l40s-03", "device": "gpu-0"}]}}}},
    ]  # fmt: skip
    shares = free_shares(slices, claims)
    assert shares["gpu-l40s-01"].free == (3, 8, 8, 8)
    assert shares["gpu-l40s-02"].free == (8, 8, 8, 0)
    assert shares["gpu-l40s-03"].free == (8, 8, 8, 8)


def test_a_pool_at_a_newer_generation_hides_its_older_slice(slices: list[dict[str, Any]]) -> None:
    old = copy.deepcopy(slices[0])
    new = copy.deepcopy(slices[0])
    new["metadata"]["name"] = old["metadata"]["name"] + "-b"
    new["spec"]["pool"]["generation"] = 2
    new["spec"]["devices"] = new["spec"]["devices"][:2]
    shares = free_shares([old, new, *slices[1:]], [])
    assert shares[old["spec"]["nodeName"]].devices == ("gpu-0", "gpu-1")


def test_a_claim_asks_its_template_shares_and_the_driver_default_when_it_names_none() -> None:
    template = claim_template("vision", 4)
    assert requested_shares(template) == 4
    assert requested_shares({"spec": template["spec"]["spec"]}) == 4
    bare = copy.deepcopy(template)
    del bare["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
    assert requested_shares(bare) == 1
    other = copy.deepcopy(template)
    other["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
    assert requested_shares(other) is None
    two = copy.deepcopy(template)
    two["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    assert requested_shares(two) is None


def test_the_target_is_the_claims_shares_as_milli_of_a_gpu() -> None:
    target = share_target([2, 2, 4, 1], per_gpu=8)
    assert sorted(zip(target.gpu_milli.tolist(), target.count.tolist(), strict=True)) == [
        (125, 1), (250, 2), (500, 1)]  # fmt: skip
    assert set(target.num_gpu.tolist()) == {1}
    assert share_target([], per_gpu=8).gpu_milli.tolist() == [1000]
    assert share_milli(3, 8) == 375 and share_milli(9, 8) == 1000


def simulator_scores(free_milli: list[list[int]], cpu: int, target_milli: list[int], ask: int) -> list[int]:
    """The simulator's FGD policy on the same nodes (first-fit, as on a DRA pool): a node per row of per-GPU
    free milli, ``cpu`` free milli-CPU on each, the target the one-GPU pods of ``target_milli``."""
    c = cluster(*[(f"n{i}", cpu, 10**6, len(row), "") for i, row in enumerate(free_milli)])
    state = ClusterState(c)
    for i, row in enumerate(free_milli):
        for g, free in enumerate(row):
            if free < 1000:
                state.allocate(i, 0, 0, [g], 1000 - free)
    target = workload(*[(0, 0, 1, m) for m in target_milli])
    pods = workload((0, 0, 1, ask), *[(0, 0, 1, m) for m in target_milli])
    shapes = build_shapes(pods, c)
    from scheduler.fgd.shapes import target_workload

    frag = NodeFragmentation(state, target_workload(target), shapes.node_model, sorted(set(c.gpu_model)))
    policy = make_policy("FGD")
    policy.bind(Context(c, state, shapes, frag, np.random.default_rng(0), share_rule="first-fit"))
    batch = Batch(policy.ctx, 0, np.arange(c.size))
    score, _ = policy.score(batch)
    return np.where(batch.feasible, score, -1).tolist()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_claims_score_on_the_slices_is_the_simulators_fgd_score(
    slices: list[dict[str, Any]], seed: int
) -> None:
    """Random allocations on the twin's slices: share_scores of a claim equals the simulator's FGD policy's
    score of the same ask on the same free milli, node by node, and its device is the first with room."""
    rng = np.random.default_rng(seed)
    claims: list[dict[str, Any]] = []
    used: dict[tuple[str, str], int] = {}
    for i in range(int(rng.integers(4, 20))):
        node = f"gpu-l40s-0{int(rng.integers(1, 4))}"
        device = f"gpu-{int(rng.integers(0, 4))}"
        ask = int(rng.choice([1, 2, 4]))
        if used.get((node, device), 0) + ask <= 8:
            used[(node, device)] = used.get((node, device), 0) + ask
            claims.append(allocated(f"c{i}", node, device, ask))
    shares = free_shares(slices, claims)
    sc = share_cluster(shares, dict.fromkeys(shares, 64000), dict.fromkeys(shares, 10**6))
    asked = [int(a) for a in rng.choice([1, 2, 4, 8], size=10)]
    ask = int(rng.choice([1, 2, 3, 4]))
    scores, picks = share_scores(sc, share_target(asked, 8), ask)
    free_milli = [[share_milli(f, 8) for f in shares[n].free] for n in sc.cluster.names]
    expected = simulator_scores(free_milli, 64000, [share_milli(a, 8) for a in asked], share_milli(ask, 8))
    assert scores.tolist() == expected
    for n, pick in zip(sc.cluster.names, picks.tolist(), strict=True):
        room = [g for g, f in enumerate(shares[n].free) if f >= ask]
        assert pick == (room[0] if room else -1)


def test_fgd_keeps_a_gpu_whole_where_packing_would_not(slices: list[dict[str, Any]]) -> None:
    """The target is half-GPU claims; node 01 has a GPU with 5 shares free, node 02 one with 4 free. A 1-share
    claim on node 02's 4-free GPU would strand 3 shares no half-GPU claim can use; on node 01's 5-free GPU it
    leaves exactly a half GPU: FGD prefers node 01."""
    claims = [allocated(f"a{g}", "gpu-l40s-01", f"gpu-{g}", 8) for g in (0, 1, 2)]
    claims += [allocated("a3", "gpu-l40s-01", "gpu-3", 3)]
    claims += [allocated(f"b{g}", "gpu-l40s-02", f"gpu-{g}", 8) for g in (0, 1, 2)]
    claims += [allocated("b3", "gpu-l40s-02", "gpu-3", 4)]
    claims += [allocated(f"c{g}", "gpu-l40s-03", f"gpu-{g}", 8) for g in (0, 1, 2, 3)]
    shares = free_shares(slices, claims)
    sc = share_cluster(shares, dict.fromkeys(shares, 64000), dict.fromkeys(shares, 10**6))
    scores, picks = share_scores(sc, share_target([4] * 5, 8), 1)
    by_node = dict(zip(sc.cluster.names, scores.tolist(), strict=True))
    assert by_node["gpu-l40s-03"] == -1
    assert by_node["gpu-l40s-01"] > by_node["gpu-l40s-02"]
    assert picks.tolist()[:2] == [3, 3]


def test_a_node_without_the_pods_cpu_is_infeasible(slices: list[dict[str, Any]]) -> None:
    shares = free_shares(slices, [])
    cpu = {"gpu-l40s-01": 1000, "gpu-l40s-02": 8000, "gpu-l40s-03": 8000}
    sc = share_cluster(shares, cpu, dict.fromkeys(shares, 10**6))
    scores, _ = share_scores(sc, share_target([2], 8), 2, cpu_milli=2000)
    assert scores.tolist()[0] == -1 and min(scores.tolist()[1:]) >= 0
