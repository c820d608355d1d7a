"""GPU shares through DRA in the simulator: kube-scheduler's allocator picks the GPU (`first-fit`), the policy
only the node, and a stack's DRA pool gives each pod the shares that cover its ask."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from infra.simulate.stack import route, share_rule, stack_model
from infra.stackfile import parse_config
from scheduler.fgd.state import ClusterState
from scheduler.sim.runner import replay
from tests.conftest import ROOT
from tests.sim.tiny import cluster, workload


@pytest.mark.parametrize("policy", ["MostAllocated", "FGD", "Random"])
def test_first_fit_takes_the_first_gpu_with_room_whatever_the_policy(policy: str) -> None:
    """Two 1/4-GPU pods on a two-GPU node: the allocator gives both GPU 0; the device plugin's rule spreads."""
    c = cluster(("a", 8000, 8192, 2, "T4"))
    pods = workload((1000, 1024, 1, 250), (1000, 1024, 1, 250))
    first = replay(
        c, pods, policy, rng=np.random.default_rng(1), share_rule="first-fit", check=ClusterState.check
    )
    assert [p[1] for p in first.placements if p] == [[0], [0]]
    if policy != "Random":  # Random draws its own GPU outside DRA
        spread = replay(c, pods, policy, rng=np.random.default_rng(1), share_rule="distributed")
        assert [p[1] for p in spread.placements if p] == [[0], [1]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fgd_under_first_fit_only_ever_takes_the_first_gpu_with_room(seed: int) -> None:
    """A random mix of shares and whole GPUs on three uneven nodes: every share FGD places lands on the first
    GPU of its node that had room at that moment, as the allocator would put it."""
    c = cluster(("a", 16000, 65536, 4, "T4"), ("b", 16000, 65536, 2, "T4"), ("c", 16000, 65536, 1, "T4"))
    rng = np.random.default_rng(seed)
    asks = rng.choice([125, 250, 375, 500, 750, 1000], size=24)
    pods = workload(*[(500, 512, 1, int(a)) for a in asks])
    run = replay(c, pods, "FGD", share_rule="first-fit", check=ClusterState.check)
    free = [np.full(int(n), 1000) for n in c.num_gpu]
    shares = 0
    for ask, placement in zip(asks.tolist(), run.placements, strict=True):
        if placement is None:
            continue
        node, gpus = placement
        if ask < 1000:
            shares += 1
            assert gpus == [int(np.flatnonzero(free[node] >= ask)[0])]
        for g in gpus:
            free[node][g] -= ask
    assert shares >= 10


def _stack() -> object:
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"])
    config["gpufleet:cluster"]["kubernetesVersion"] = "1.36"
    config["gpufleet:nodePools"][1]["sharing"] = "dra-shares"
    return parse_config(config, "test")


def test_a_dra_pool_gives_the_shares_that_cover_the_ask_and_takes_whole_gpus() -> None:
    spec = _stack()
    model = stack_model(spec)  # type: ignore[arg-type]
    assert share_rule(model) == "first-fit" and model.units["l40s"] == 8
    pods = workload((1000, 1024, 1, 300), (1000, 1024, 1, 100), (1000, 1024, 2, 1000))
    routed, routing = route(model, pods, spec)  # type: ignore[arg-type]
    assert routed.gpu_milli.tolist() == [375, 125, 1000]  # 3 shares, 1 share, two whole GPUs
    assert routed.gpu_spec[0] == "l40s" and "l40s" in routed.gpu_spec[2].split("|")
    assert routing.overgiven_milli == 75 + 25 and routing.unexpressed_milli == 0
    assert "DRA shares of 125 milli-GPU that cover their asks" in routing.lines()[1]


def test_invoke_simulate_replays_a_dra_stack_with_the_allocator_rule(tmp_path: Path) -> None:
    """`invoke simulate --stack` on a dra-shares stack: FGD and the deployed profile (no extender: it has no view
    of DRA devices), the shares noted, and FGD places the mix at least as well as MostAllocated."""
    from io import StringIO

    from rich.console import Console

    from infra.simulate.run import Request, simulate

    pods = tmp_path / "pods.csv"
    rows = ["cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    rows += [f"1000,1024,1,{m}," for m in [500, 250, 750, 375, 125, 500, 250, 1000] * 4]
    pods.write_text("\n".join(rows) + "\n")
    out = StringIO()
    req = Request(pods=str(pods), stack="metal-shares", nodes="", policy="", seeds="1,2", json=str(tmp_path / "r.json"),
                  processes=1, as_deployed=False, replicas=0, strict=False, twin=False, extender_http=False,
                  out=str(tmp_path / "sim"), dynamic=False, time_scale=1.0, provision_delay=0.0)  # fmt: skip
    simulate(
        req,
        load=lambda _name: _stack(),
        console=Console(file=out, width=200),
        build=tmp_path,
        twin_replay=None,
    )  # type: ignore[arg-type,return-value]
    text = out.getvalue()
    assert "DRA shares of 125 milli-GPU that cover their asks" in text
    runs = json.loads((tmp_path / "r.json").read_text())
    assert {r["policy"] for r in runs} == {"FGD", "MostAllocated"}
    by: dict[str, list[float]] = {}
    for r in runs:
        by.setdefault(r["policy"], []).append(r["allocated"][100])
    assert sum(by["FGD"]) >= sum(by["MostAllocated"])


def test_where_every_gpu_pod_claims_the_profile_scores_only_cpu_and_memory() -> None:
    """NodeResourcesFit counts no claim: a stack whose GPU pools are all claims sends GPU weights that count
    nothing; one with a pool of whole GPUs beside them keeps its GPU weight there."""
    mixed = stack_model(_stack())  # type: ignore[arg-type]
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"])
    config["gpufleet:cluster"]["kubernetesVersion"] = "1.36"
    for pool in config["gpufleet:nodePools"]:
        pool["sharing"] = "dra-shares"
    claims_only = stack_model(parse_config(config, "test"))
    assert mixed.weights["gpu"] == 10 and mixed.weights["cpu"] == 1
    assert claims_only.weights == {**mixed.weights, "gpu": 0, "shared": 0}
    assert claims_only.claims == {"h100", "l40s"} and claims_only.gpu_models["h100"] == "H100"
