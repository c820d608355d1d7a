"""Property tests: no policy ever over-allocates, totals are conserved after every pod, and a pod fails only
when no node can take it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.fgd.shapes import allowed_models, build_shapes, target_workload
from scheduler.fgd.state import ClusterState
from scheduler.sim import ALL_POLICIES
from scheduler.sim.runner import replay

MODELS = ("A10", "T4")


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    n = draw(st.integers(1, 5))
    nodes = [
        (
            f"n{i}",
            draw(st.sampled_from([2000, 8000, 32000])),
            draw(st.sampled_from([4096, 65536])),
            draw(st.integers(0, 8)),
            draw(st.sampled_from(MODELS)),
        )
        for i in range(n)
    ]
    names, cpu, mem, gpus, models = zip(*nodes, strict=True)
    return Cluster.build(names, cpu, mem, gpus, models)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    pods = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["cpu", "share", "whole"]))
        k, d = {
            "cpu": (0, 0),
            "share": (1, draw(st.integers(1, 999))),
            "whole": (draw(st.integers(1, 8)), MILLI),
        }[kind]
        spec = draw(st.sampled_from(["", "", "T4", "A10|T4"])) if k else ""
        pods.append(
            (draw(st.sampled_from([500, 1000, 4000])), draw(st.sampled_from([512, 2048])), k, d, spec)
        )
    cpu, mem, num_gpu, milli, spec = zip(*pods, strict=True)
    return Workload.build(cpu, mem, num_gpu, milli, spec)


def fits_anywhere(c: Cluster, free_cpu, free_mem, free_gpu, pod: tuple[int, int, int, int, str]) -> bool:
    cpu, mem, k, d, spec = pod
    allowed = allowed_models(spec)
    for n in range(c.size):
        model_ok = not allowed or c.gpu_model[n] in allowed
        if free_cpu[n] >= cpu and free_mem[n] >= mem and model_ok and (free_gpu[n] >= d).sum() >= k:
            return True
    return False


@pytest.mark.parametrize("policy", sorted(ALL_POLICIES))  # FGD-Extender: tests/sim/test_fgd_extender.py
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=clusters(), w=workloads(), seed=st.integers(0, 2**16))
def test_never_over_allocated_and_conserved(policy: str, c: Cluster, w: Workload, seed: int) -> None:
    snapshots = [(c.cpu_milli.copy(), c.memory_mib.copy(), ClusterState(c).free_gpu.copy())]

    def check(state: ClusterState) -> None:
        state.check()  # allocated + free == capacity, nothing negative, on every node and dimension
        snapshots.append((state.free_cpu.copy(), state.free_mem.copy(), state.free_gpu.copy()))

    run = replay(c, w, policy, rng=np.random.default_rng(seed), check=check)
    pods = w.requests()
    placed_gpu = 0
    for i, (placement, pod) in enumerate(zip(run.placements, pods, strict=True)):
        before = snapshots[i]
        if placement is None:
            assert not fits_anywhere(c, *before, pod), f"pod {i} failed although a node fits it"
            continue
        node, gpus = placement
        allowed = allowed_models(pod[4])
        assert not allowed or c.gpu_model[node] in allowed
        assert len(gpus) == pod[2]
        if pod[3] == MILLI:
            assert all(before[2][node][g] == MILLI for g in gpus)  # whole GPUs are fully free ones
        placed_gpu += pod[2] * pod[3]
    assert run.state.allocated_gpu_milli == placed_gpu
    assert run.arrived[-1] == int((w.num_gpu * w.gpu_milli).sum())
    shapes = build_shapes(w, c)
    fresh = NodeFragmentation(run.state, target_workload(w), shapes.node_model, sorted(set(c.gpu_model)))
    assert run.frag[-1] == pytest.approx(fresh.total, abs=1e-6)  # incremental float sum drifts by ~1e-12


@pytest.mark.parametrize("policy", ["MostAllocated", "LeastAllocated"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=clusters(), wl=workloads(), seed=st.integers(0, 2**16), shared=st.sampled_from([None, 0, 3]))
def test_a_few_nodes_scored_in_python_score_as_the_batch_does(
    policy: str, c: Cluster, wl: Workload, seed: int, shared: int | None
) -> None:
    """The dynamic simulator scores the few nodes changed since it last looked in Python (`score_few`); on any
    state, every shape, and with the sharing weight set or not, that gives the batch's scores and sharing
    GPU on every node where the shape fits."""
    from scheduler.sim.policies import Context, make_policy
    from scheduler.sim.policies.base import Batch, least_free_fitting_gpu, least_free_fitting_gpu_of

    shapes = build_shapes(wl, c)
    state = ClusterState(c)
    rng = np.random.default_rng(seed)
    for node in range(c.size):  # some of each node's resources taken, GPU by GPU
        gpus = [g for g in range(int(c.num_gpu[node])) if rng.random() < 0.5]
        milli = int(rng.integers(1, MILLI + 1))
        state.allocate(node, int(rng.integers(0, c.cpu_milli[node] // 2 + 1)),
                       int(rng.integers(0, c.memory_mib[node] // 2 + 1)), gpus, milli if gpus else 0)  # fmt: skip
    frag = NodeFragmentation(state, target_workload(wl), shapes.node_model, sorted(set(c.gpu_model)))
    pol = make_policy(policy, **({} if shared is None else {"shared": shared, "cpu": 2}))
    pol.bind(Context(c, state, shapes, frag, rng))
    for s in range(len(shapes.requests)):
        batch = Batch(pol.ctx, s, np.arange(c.size))
        score, _ = pol.score(batch)
        nodes = [int(n) for n in np.flatnonzero(batch.feasible)]
        assert pol.score_few(s, nodes) == score[nodes].tolist()
        _, _, k, d = shapes.requests[s]
        if k == 1 and d < MILLI and nodes:
            want = least_free_fitting_gpu(batch)[nodes].tolist()
            assert [least_free_fitting_gpu_of(state.free_gpu[n].tolist(), d) for n in nodes] == want
