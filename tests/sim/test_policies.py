"""Each policy's scores and choice on tiny hand-computed clusters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scheduler.sim import REGISTRY, UnknownPolicyError, make_policy
from scheduler.sim.runner import replay
from tests.sim.tiny import cluster, node_scores, workload


def placed_on(c, pods, policy: str, seed: int = 0, **params: int) -> list[tuple[str, list[int]] | None]:
    run = replay(c, pods, policy, rng=np.random.default_rng(seed), params=params or None)
    return [None if p is None else (c.names[p[0]], p[1]) for p in run.placements]


def test_registry_has_every_policy_and_rejects_unknown_names() -> None:
    assert set(REGISTRY) == {
        "Random",
        "DotProd",
        "GpuClustering",
        "GpuPacking",
        "BestFit",
        "FGD",
        "FGD-Extender",
        "FGD-Extender-DRA",
        "RoundRobin",
        "LeastAllocated",
        "MostAllocated",
    }
    assert make_policy("fgd").name == "FGD"
    with pytest.raises(UnknownPolicyError, match="unknown policy 'Tetris'; choose from BestFit, DotProd"):
        make_policy("Tetris")
    with pytest.raises(TypeError, match="takes no parameters"):
        make_policy("FGD", weight=2)


def test_dotprod_prefers_least_aligned_node() -> None:
    c = cluster(("a", 64000, 100000, 2, "T4"), ("b", 8000, 100000, 8, "G2"))
    pod = (4000, 1000, 1, 1000)
    # a: 1 - (0.5*0.03125 + 0.25*0.125)/2 = 0.9765625 -> 97; b: 1 - (0.0625*0.03125 + 1*0.125)/2 -> 93
    scores, _ = node_scores(c, workload(pod), "DotProd", pod)
    assert scores == [97, 93]
    assert placed_on(c, workload(pod), "DotProd") == [("a", [0])]


def test_bestfit_prefers_tightest_node() -> None:
    c = cluster(("a", 32000, 100000, 4, "T4"), ("b", 8000, 100000, 1, "T4"))
    pod = (4000, 1000, 1, 1000)
    # a: 1 - (0.5*28000/128000 + 0.5*3000/8000) = 0.703125 -> 70; b: 1 - 0.5*4000/128000 -> 98
    scores, _ = node_scores(c, workload(pod), "BestFit", pod)
    assert scores == [70, 98]
    assert placed_on(c, workload(pod), "BestFit") == [("b", [0])]


def test_gpu_clustering_groups_pods_by_tag() -> None:
    c = cluster(("a", 32000, 100000, 2, "T4"), ("b", 32000, 100000, 2, "T4"), ("c", 32000, 100000, 2, "T4"))
    share, whole, cpu_only = (1000, 100, 1, 500), (1000, 100, 1, 1000), (1000, 100, 0, 0)
    pods = workload(share, whole, share, cpu_only)
    # 1: all empty, 25 + 25*6000//8000 = 43 each -> a.  2: a has only other tags -> 25*6500//8000 = 20; b, c 43
    # -> b.  3: a has exactly `share` -> 75 + 20 = 95 -> a, on its least free fitting GPU (GPU 0, 500 free).
    # 4: CPU-only pods score 0 everywhere -> the smallest name.
    assert placed_on(c, pods, "GpuClustering") == [("a", [0]), ("b", [0]), ("a", [0]), ("a", [])]


def test_gpu_clustering_tag_cases_after_placements() -> None:
    # node a (8 GPUs) receives a share pod then a 2-GPU pod by RoundRobin-free construction: one node only
    c = cluster(
        ("a", 64000, 100000, 8, "G2"),
    )
    share, two = (1000, 1, 1, 500), (1000, 1, 2, 1000)
    run = replay(c, workload(share, two, two), "GpuClustering")
    assert run.placements == [(0, [0]), (0, [1, 2]), (0, [3, 4])]
    # scores seen by a third kind of pod and by the kinds already there, via the same bookkeeping
    pol = make_policy("GpuClustering")
    pods = workload(share, two, (1000, 1, 1, 1000))
    replayed = replay(c, pods, pol)
    free = int(replayed.state.free_gpu_sum[0])  # 8000 - 500 - 2000 - 1000 = 4500
    assert free == 4500
    b = 25 * (8000 - free) // 8000
    from scheduler.sim.policies.base import Batch

    def score(shape: int) -> int:
        return int(pol.score(Batch(pol.ctx, shape, np.arange(1)))[0][0])

    assert score(0) == 50 + b  # share: among other tags
    assert score(2) == 50 + b  # 1-gpu: among other tags
    only = replay(c, workload(share, share), make_policy("GpuClustering"))
    assert only.placements == [(0, [0]), (0, [0])]  # exactly its own tag (75 + b) beats nothing else here


def test_gpu_packing_cases() -> None:
    c = cluster(("a", 32000, 100000, 2, "T4"), ("b", 32000, 100000, 4, "T4"))
    one, share = (1000, 100, 1, 1000), (1000, 100, 1, 300)
    # empty nodes: max(33 - F, F) -> a 31, b 29
    assert node_scores(c, workload(one), "GpuPacking", one)[0] == [31, 29]
    # a with one full GPU used: the share pod needs a fully free GPU -> max(50 - 1, 33) = 49
    assert node_scores(c, workload(share), "GpuPacking", share, [(0, 0, 0, [0], 1000)])[0] == [49, 29]
    # a with 700 free on GPU 1: shared GPU, S = 70 -> 100 - 7 = 93
    after = [(0, 0, 0, [0], 1000), (0, 0, 0, [1], 300)]
    assert node_scores(c, workload(share), "GpuPacking", share, after)[0] == [93, 29]
    assert placed_on(c, workload(one, share, share), "GpuPacking") == [("a", [0]), ("a", [1]), ("a", [1])]
    assert node_scores(c, workload(one), "GpuPacking", (1000, 100, 0, 0))[0] == [0, 0]


def test_fgd_hand_computed_delta_and_gpu_choice() -> None:
    # target M: share 600 (p = 0.75) and one whole GPU (p = 0.25)
    target = workload((1000, 100, 1, 600), (1000, 100, 1, 600), (1000, 100, 1, 600), (1000, 100, 1, 1000))
    c = cluster(("a", 32000, 100000, 2, "T4"), ("c", 32000, 100000, 2, "T4"))
    share = (1000, 100, 1, 600)
    # c has GPU 1 at 700 free (300 used): before F = 0.25 * 700 = 175.
    # GPU 1 -> [1000, 100]: F = 0.75*100 + 0.25*100 = 100, delta = -75 -> floor(100*sigmoid(0.075)) = 51
    # GPU 0 -> [400, 700]: F = 0.75*400 + 0.25*1100 = 575, delta = 400 -> 40. a: delta = 400 -> 40.
    scores, gpus = node_scores(c, target, "FGD", share, [(1, 0, 0, [1], 300)])
    assert scores == [math.floor(100 / (1 + math.exp(0.4))), math.floor(100 / (1 + math.exp(-0.075)))]
    assert scores == [40, 51]
    assert gpus[1] == 1
    assert gpus[0] == 0  # equal scores on both GPUs of a: the lowest index


def test_fgd_cpu_only_pod_that_changes_nothing_scores_50() -> None:
    target = workload((1000, 100, 1, 500), (1000, 100, 0, 0))
    c = cluster(
        ("a", 32000, 100000, 2, "T4"),
    )
    scores, _ = node_scores(c, target, "FGD", (1000, 100, 0, 0))
    assert scores == [50]
    # taking CPU below the target shape's need strands the node's GPUs: delta = 0.5*2000 -> sigmoid(-1) -> 26
    scores, _ = node_scores(c, target, "FGD", (31500, 100, 0, 0))
    assert scores == [26]


def test_round_robin_walks_nodes_in_turn() -> None:
    c = cluster(("a", 8000, 100000, 1, "T4"), ("b", 8000, 100000, 1, "T4"), ("c", 2000, 100000, 1, "T4"))
    pods = workload(*[(1000, 1, 0, 0)] * 4, (3000, 1, 0, 0), (3000, 1, 0, 0))
    names = [p[0] if p else None for p in placed_on(c, pods, "RoundRobin")]
    assert names == ["a", "b", "c", "a", "b", "a"]  # c lacks CPU for the 3000 pods; the turn skips it


def test_random_only_picks_feasible_nodes_and_fitting_gpus() -> None:
    c = cluster(("a", 4000, 100000, 2, "T4"), ("b", 4000, 100000, 2, "T4"), ("c", 500, 100000, 2, "T4"))
    seen_nodes, seen_gpus = set(), set()
    for seed in range(30):
        placement = placed_on(c, workload((1000, 1, 1, 400)), "Random", seed)[0]
        assert placement is not None
        seen_nodes.add(placement[0])
        seen_gpus.add(placement[1][0])
    assert seen_nodes == {"a", "b"}
    assert seen_gpus == {0, 1}


def test_model_restricted_pod_only_lands_on_allowed_models() -> None:
    c = cluster(
        ("a", 4000, 100000, 2, "T4"), ("b", 4000, 100000, 2, "V100M16"), ("c", 4000, 100000, 2, "A10")
    )
    pods = workload(
        (1000, 1, 1, 1000, "V100M16|A10"), (1000, 1, 1, 1000, "V100M16|A10"), (1000, 1, 2, 1000, "A10")
    )
    for policy in REGISTRY:
        # the extender on DRA claims runs only where the allocator picks the device (first fit)
        rule = "first-fit" if policy == "FGD-Extender-DRA" else "policy"
        run = replay(c, pods, policy, rng=np.random.default_rng(0), share_rule=rule)
        names = {c.names[p[0]] for p in run.placements if p}
        assert len(names) > 0 and names <= {"b", "c"}, policy


def test_least_and_most_allocated_as_kubernetes_scores() -> None:
    c = cluster(("a", 10000, 10000, 2, "T4"), ("b", 20000, 10000, 1, "T4"))
    pod = (5000, 5000, 1, 1000)
    # least: a (50+50+50)//3 = 50; b (75+50+0)//3 = 41
    assert node_scores(c, workload(pod), "LeastAllocated", pod)[0] == [50, 41]
    # most (1, 1, 10): a (50+50+500)//12 = 50; b (25+50+1000)//12 = 89
    assert node_scores(c, workload(pod), "MostAllocated", pod)[0] == [50, 89]
    # a CPU-only pod does not request nvidia.com/gpu, so the GPU is not scored: a (50+50)//2, b (25+50)//2
    cpu_pod = (5000, 5000, 0, 0)
    assert node_scores(c, workload(cpu_pod), "MostAllocated", cpu_pod)[0] == [50, 37]
    # weights are parameters
    assert node_scores(c, workload(pod), "MostAllocated", pod, nvidia_com_gpu=1)[0] == [50, 58]
    assert placed_on(c, workload(pod), "MostAllocated") == [("b", [0])]
    assert placed_on(c, workload(pod), "LeastAllocated") == [("a", [0])]


def test_failed_pod_is_dropped_and_counted() -> None:
    c = cluster(
        ("a", 4000, 100000, 1, "T4"),
    )
    run = replay(c, workload((1000, 1, 1, 1000), (1000, 1, 1, 1000), (1000, 1, 1, 500)), "BestFit")
    assert run.placements[0] == (0, [0])
    assert run.placements[1] is None and run.placements[2] is None
    assert run.failed == 2
    assert run.arrived.tolist() == [1000, 2000, 2500]
    assert run.allocated.tolist() == [1000, 1000, 1000]
