"""FragmentationAware on the twin: the extender as deployed (its real entry point and watch, behind the real
gpu-binpack scheduler with its real configuration), placing where FGD says and plain MostAllocated does not.

The scenario is found, not arranged: the simulator's protocol (scheduler.sim) on a metal-shaped stack (8 H100
hosts, 12 time-sliced L40S hosts) with the openb default trace, seed 42, routed as the stack deploys it. In the
simulator the FGD-Extender and MostAllocated replays first disagree at some pod. The cluster as the FGD replay
left it before that pod is rebuilt on a replay twin (those pods created already bound), once with each profile,
and the pod is then scheduled by the real kube-scheduler.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from infra.simulate.stack import route, stack_model
from infra.stackfile import parse_config
from scheduler import sim
from scheduler.sim.policies.fgd_extender import pod_object
from scheduler.sim.protocol import INFLATION, order_and_inflate, rank_nodes
from scheduler.sim.runner import replay
from tests.conftest import ROOT
from tests.twin.conftest import toolchain
from twin.replay import ReplayTwin


@pytest.fixture(scope="module")
def scenario(shared_dir: Path) -> dict:
    config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    config = copy.deepcopy(config)
    config["gpufleet:nodePools"][0]["hosts"] = [f"h100-{i}" for i in range(8)]
    config["gpufleet:nodePools"][1]["hosts"] = [f"l40s-{i}" for i in range(12)]
    config["gpufleet:teams"] = [{"name": "a", "quotas": {"h100": 64, "l40s": 48}}]
    config["gpufleet:scheduling"] = {"placement": {"strategy": "FragmentationAware"}}
    spec = parse_config(config, "fa")
    model = stack_model(spec)
    trace = shared_dir / "traces" / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    workload, _ = route(model, sim.read_pods(trace), spec)
    rng = np.random.default_rng(42)
    pods = workload.take(order_and_inflate(workload, rng, INFLATION * model.cluster.gpu_capacity_milli))
    cluster = rank_nodes(model.cluster, rng)
    fgd = replay(cluster, pods, "FGD-Extender", target=workload, share_rule="distributed").placements
    packed = replay(
        cluster, pods, "MostAllocated", target=workload, params=model.weights, share_rule="distributed"
    ).placements
    first = next(i for i, (a, b) in enumerate(zip(fgd, packed, strict=True)) if (a and a[0]) != (b and b[0]))
    return {"model": model, "workload": workload, "pods": pods, "cluster": cluster, "fgd": fgd, "packed": packed,
            "first": first}  # fmt: skip


def pod(scenario: dict, i: int) -> dict:
    p = scenario["pods"]
    return pod_object(f"pod-{i:05d}", int(p.cpu_milli[i]), int(p.memory_mib[i]), int(p.num_gpu[i]),
                      int(p.gpu_milli[i]), p.gpu_spec[i])  # fmt: skip


def schedule_after_fgd_prefix(scenario: dict, profile: str, folder: Path) -> str | None:
    cluster, first = scenario["cluster"], scenario["first"]
    twin = ReplayTwin.start(cluster, scenario["model"].units, profile, folder, target=scenario["workload"])
    try:
        bound = 0
        for i in range(first):
            placed = scenario["fgd"][i]
            if placed is not None:
                twin.bound(pod(scenario, i), str(cluster.names[placed[0]]))
                bound += 1
        twin.settled(bound)  # the scheduler's cache and the extender's view have taken the bound pods in
        return twin.place(pod(scenario, first))
    finally:
        twin.stop()


def best_nodes(scenario: dict) -> tuple[set[str], set[str]]:
    """The nodes FGD (the extender's highest priority) and MostAllocated (its highest score) rank first for the
    divergent pod, on the cluster as the FGD replay left it: every node of a tie is as right as another, and
    kube-scheduler breaks ties at random among the highest scores (pkg/scheduler/schedule_one.go selectHost)."""
    from scheduler.extender import wire
    from scheduler.extender.resources import pod_request
    from scheduler.extender.view import ExtenderView
    from scheduler.sim.policies.fgd_extender import node_object
    from tests.sim.tiny import node_scores

    cluster, first, model = scenario["cluster"], scenario["first"], scenario["model"]
    p = scenario["pods"]
    view = ExtenderView(expected=scenario["workload"])
    names = [str(n) for n in cluster.names]
    rows = zip(names, cluster.cpu_milli, cluster.memory_mib, cluster.num_gpu, cluster.gpu_model, strict=True)
    for n, c, m, g, gm in rows:
        view.set_node(node_object(n, int(c), int(m), int(g), str(gm), model.units.get(str(gm), 1)))
    allocations = []
    for i in range(first):
        placed = scenario["fgd"][i]
        if placed is not None:
            view.pod_bound(f"pod-{i:05d}", names[placed[0]], pod_request(pod(scenario, i)))
            allocations.append(
                (placed[0], int(p.cpu_milli[i]), int(p.memory_mib[i]), placed[1], int(p.gpu_milli[i]))
            )
    feasible = view.filter(wire.parse_args({"pod": pod(scenario, first), "nodenames": names}))
    passed = feasible.get("nodenames") or feasible.get("NodeNames") or []
    ranked = view.prioritize(wire.parse_args({"pod": pod(scenario, first), "nodenames": passed}))
    key = "score" if "score" in ranked[0] else "Score"
    host = "host" if "host" in ranked[0] else "Host"
    top = max(h[key] for h in ranked)
    fgd = {h[host] for h in ranked if h[key] == top}
    shape = (int(p.cpu_milli[first]), int(p.memory_mib[first]), int(p.num_gpu[first]), int(p.gpu_milli[first]),
             p.gpu_spec[first])  # fmt: skip
    scores, _ = node_scores(
        cluster, scenario["workload"], "MostAllocated", shape, allocations, **model.weights
    )
    packed = {names[i] for i, v in enumerate(scores) if v == max(scores) and v >= 0}
    return fgd, packed


def test_the_extender_places_where_fgd_says_and_most_allocated_does_not(
    scenario: dict, tmp_path: Path
) -> None:
    """kube-scheduler calls the extender's filter and prioritize (weight 100 x 10/10 per point outweighs every
    in-tree score, pkg/scheduler/schedule_one.go prioritizeNodes), then binds the pod itself; so the pod goes
    where FGD puts it. Without the extender, the same profile's MostAllocated packs it elsewhere."""
    toolchain("1.35")
    fgd, packed = best_nodes(scenario)
    assert fgd and packed and not (fgd & packed), (fgd, packed)
    got_fa = schedule_after_fgd_prefix(scenario, "FragmentationAware", tmp_path / "fa")
    got_packed = schedule_after_fgd_prefix(scenario, "MostAllocated", tmp_path / "ma")
    assert got_fa in fgd, (got_fa, fgd)
    assert got_packed in packed, (got_packed, packed)


def test_a_fragmentation_aware_stack_binds_team_gpu_pods_through_its_extender(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The metal stack with `placement.strategy: FragmentationAware`, deployed as the stack deploys it: the
    gpu-binpack configuration read back from its ConfigMap calls the extender at http://127.0.0.1:8888, where the
    extender runs with its sidecar's arguments; a team's GPU job is admitted by Kueue, filtered and scored
    through the extender (its log shows both verbs for the pod, and no bind: the scheduler binds), and the pod
    runs on an H100 host."""
    from tests.support import eventually
    from tests.twin.conftest import stack_variant, start_twin, twin_log
    from tests.twin.kube import Kube, job, name

    path = stack_variant(
        tmp_path_factory, "metal", "metal-fa", scheduling={"placement": {"strategy": "FragmentationAware"}}
    )
    twin = start_twin(tmp_path_factory, path)
    try:
        kube = Kube.of(twin)
        vision = kube.as_member(("vision-team",))
        train = name("train")
        ask = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 8}
        assert vision.create(job(train, "vision", ask, pod={"schedulerName": "gpu-binpack"})).ok

        def bound() -> list[dict]:
            pods = kube.items("pods", "vision", f"batch.kubernetes.io/job-name={train}")
            return [p for p in pods if p["spec"].get("nodeName")]

        (placed,) = eventually(bound, "the pod bound", 90)
        assert placed["spec"]["nodeName"].startswith("gpu-h100-")
        log = twin_log(twin, "extender")
        for verb in ("/filter", "/prioritize"):
            assert f"POST {verb}" in log, verb
        assert "POST /bind" not in log
    finally:
        twin.stop()
