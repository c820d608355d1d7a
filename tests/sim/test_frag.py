"""The fragmentation measure, hand-computed, and the incremental total against a recomputation."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.shapes import build_shapes, target_workload
from scheduler.fgd.state import ClusterState
from scheduler.sim import read_nodes, read_pods
from tests.sim.tiny import cluster, workload

# target M (10 pods, all four shapes needed for 95 %): CPU-only 0.2, share 500 0.4, two whole GPUs 0.2,
# one whole V100 GPU 0.2
TARGET = workload(
    (1000, 1, 0, 0),
    (1000, 1, 0, 0),
    (1000, 1, 1, 500),
    (1000, 1, 1, 500),
    (1000, 1, 1, 500),
    (1000, 1, 1, 500),
    (2000, 1, 2, 1000),
    (2000, 1, 2, 1000),
    (1000, 1, 1, 1000, "V100"),
    (1000, 1, 1, 1000, "V100"),
)


def frag_of(c, allocations) -> NodeFragmentation:
    state = ClusterState(c)
    for node, cpu, mem, gpus, milli in allocations:
        state.allocate(node, cpu, mem, gpus, milli)
    shapes = build_shapes(TARGET, c)
    return NodeFragmentation(state, target_workload(TARGET), shapes.node_model, sorted(set(c.gpu_model)))


def test_target_workload_is_popular_shapes_renormalised() -> None:
    t = target_workload(TARGET)
    assert sorted(zip(t.gpu_milli.tolist(), t.num_gpu.tolist(), t.prob.round(3).tolist(), strict=True)) == [
        (0, 0, 0.2),
        (500, 1, 0.4),
        (1000, 1, 0.2),
        (1000, 2, 0.2),
    ]
    # 95 % coverage drops the rarest shapes: 19 pods of one shape and 1 of another -> only the first
    t = target_workload(workload(*[(1, 1, 1, 300)] * 19, (1, 1, 0, 0)))
    assert t.prob.tolist() == [1.0]


def test_hand_computed_node_fragment() -> None:
    c = cluster(("a", 8000, 10, 2, "T4"), ("b", 500, 10, 2, "T4"), ("c", 8000, 10, 2, "V100"))
    fr = frag_of(c, [(0, 0, 0, [1], 700), (2, 0, 0, [1], 700)])
    # a: free [1000, 300]. CPU-only: 1300; share 500 fits -> only 300 too small; two whole GPUs do not fit
    # -> 1300; V100 only -> model not allowed -> 1300.  0.2*1300 + 0.4*300 + 0.2*1300 + 0.2*1300 = 900
    assert fr.node[0] == pytest.approx(900)
    # b: free [1000, 1000] but 500 milli-CPU: no GPU shape fits its CPU -> everything is fragment
    assert fr.node[1] == pytest.approx(2000)
    # c (V100, free [1000, 300]): the V100 pod fits (fragment 300), share 300, CPU 1300, two GPUs 1300
    assert fr.node[2] == pytest.approx(0.2 * 1300 + 0.4 * 300 + 0.2 * 1300 + 0.2 * 300)
    assert fr.total == pytest.approx(900 + 2000 + 700)
    assert fr.amount() == pytest.approx((900 + 2000 + 700) / 6000)
    assert fr.ratio() == pytest.approx((900 + 2000 + 700) / (6000 - 1400))


def test_multi_gpu_shape_counts_partial_gpus_as_fragment() -> None:
    c = cluster(
        ("a", 8000, 10, 4, "T4"),
    )
    fr = frag_of(c, [(0, 0, 0, [0], 200)])
    # free [800, 1000, 1000, 1000]: two whole GPUs fit -> fragment 800; share 500 fits everywhere -> 0;
    # CPU-only and V100 -> all 3800
    assert fr.node[0] == pytest.approx(0.2 * 3800 + 0.4 * 0 + 0.2 * 800 + 0.2 * 3800)


def test_incremental_total_matches_recomputation() -> None:
    c = cluster(("a", 8000, 10, 2, "T4"), ("b", 64000, 10, 8, "V100"), ("c", 4000, 10, 1, "T4"))
    state = ClusterState(c)
    shapes = build_shapes(TARGET, c)
    fr = NodeFragmentation(state, target_workload(TARGET), shapes.node_model, sorted(set(c.gpu_model)))
    for node, cpu, gpus, milli in [
        (0, 1000, [0], 500),
        (1, 6000, [2, 3], 1000),
        (1, 100, [0], 250),
        (2, 3500, [], 0),
    ]:
        state.allocate(node, cpu, 1, gpus, milli)
        fr.update(node)
        fresh = NodeFragmentation(state, target_workload(TARGET), shapes.node_model, sorted(set(c.gpu_model)))
        assert fr.total == pytest.approx(fresh.total)
        assert fr.node.tolist() == pytest.approx(fresh.node.tolist())


def test_empty_cluster_amount_on_default_is_about_14_percent(shared_dir: Path) -> None:
    trace = shared_dir / "traces/alibaba-gpu-v2023"
    c = read_nodes(trace / "openb_node_list_gpu_node.csv")
    w = read_pods(trace / "openb_pod_list_default.csv")
    shapes = build_shapes(w, c)
    fr = NodeFragmentation(ClusterState(c), target_workload(w), shapes.node_model, sorted(set(c.gpu_model)))
    assert 0.13 < fr.amount() < 0.15
    assert fr.ratio() == pytest.approx(fr.amount())
