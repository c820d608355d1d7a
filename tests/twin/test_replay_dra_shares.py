"""The replay through the real scheduler on GPU shares through DRA: the simulator's protocol (one seed: its order,
inflation to 1.3x the GPUs) drives a replay twin on Kubernetes 1.36 whose pool publishes each GPU as a device
of 8 shares (the NVIDIA DRA driver's ResourceSlices, `twin.dra`), every pod asking through a ResourceClaim of
its own, the real scheduler's DRA allocator choosing the device.

A tiny pool (4 nodes of unequal CPU and memory, 4 GPUs each) and one-GPU pods: shares and whole GPUs (a claim
for all 8 shares of a device). At every pod the in-process simulator scores the nodes on the state the twin's
placements made (`ctx.state`, the GPUs its first-fit rule takes), with what the stack deploys:
- gpu-binpack (MostAllocated): the simulator's MostAllocated with the GPU weights at 0, as `stack_model` sends
  it for a pool of claims (NodeResourcesFit counts no claim);
- FragmentationAware: the simulator's FGD under the allocator's first-fit rule with the trace's target, which
  the deployed extender (`--dra-shares`) is given as its `--trace` (the replay twin passes the workload).

The real scheduler must bind every pod to one of the simulator's best-scored nodes, and find no node exactly
when the simulator finds none; with FragmentationAware some pods must go where MostAllocated alone would not. The tolerance is the tie: kube-scheduler picks at random among its best nodes,
the simulator the first in its seed's rank. Every bound pod's claim must carry an allocation on the pod's node
with the shares asked, on the devices the simulator's first-fit rule takes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scheduler.dra import DRIVER, SHARES
from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.model import Cluster, Workload
from scheduler.fgd.shapes import target_workload
from scheduler.sim import run_one
from scheduler.sim.policies import Context, make_policy
from scheduler.sim.policies.base import Batch
from tests.conftest import ROOT
from tests.twin.conftest import stack_variant, toolchain
from twin.replay import ReplayTwin, TwinPolicy

POOL, PER_GPU = "l40s", 8
CLAIMS = frozenset({POOL})
SEED = 42
CLUSTER = Cluster.build(
    ["dra-a", "dra-b", "dra-c", "dra-d"],
    [
        64000,
        48000,
        32000,
        24000,
    ],  # MostAllocated fills the last by name first; the extender breaks ties by name
    [262144, 196608, 131072, 98304],
    [4, 4, 4, 4],
    [POOL] * 4,
)
# (cpu milli, memory MiB, GPUs, milli per GPU): shares of 1..6 of 8, and whole GPUs
WORKLOAD = Workload.build(
    [1000, 2000, 3000, 1500, 4000, 2500, 6000, 8000],
    [4096, 8192, 12288, 6144, 16384, 10240, 24576, 32768],  # 4 GiB a core, as every node: balanced
    [1] * 8,
    [125, 250, 375, 500, 625, 750, 1000, 1000],
    [POOL] * 8,
)


class Checked(TwinPolicy):
    """Places through the twin and records, per pod, the simulator's best nodes on the state so far."""

    def __init__(self, twin: ReplayTwin, profile: str) -> None:
        super().__init__(twin, CLAIMS, {POOL: PER_GPU})
        self.profile = profile
        self.steps: list[tuple[int, list[int]]] = []  # (the twin's node, the simulator's best), -1/[]: none
        self.packed: list[list[int]] = []  # the best nodes of the profile alone (MostAllocated)

    def expected(self, s: int, profile: str) -> np.ndarray:
        ctx = self.ctx
        if profile == "FragmentationAware":
            assert ctx.target is not None
            target = target_workload(ctx.target)
            models = sorted(set(ctx.cluster.gpu_model))
            frag = NodeFragmentation(ctx.state, target, ctx.shapes.node_model, models)
            policy = make_policy("FGD")
        else:
            frag = ctx.frag
            policy = make_policy("MostAllocated", cpu=1, memory=1, gpu=0, shared=0)
        policy.bind(Context(ctx.cluster, ctx.state, ctx.shapes, frag, ctx.rng, "first-fit", ctx.target))
        batch = Batch(policy.ctx, s, np.arange(ctx.cluster.size))
        score, _ = policy.score(batch)
        return np.where(batch.feasible, score, -1)

    def choose_node(self, column: np.ndarray, s: int) -> int:
        best, packed = (
            np.flatnonzero(scores == scores.max()).tolist() if scores.max() >= 0 else []
            for scores in (self.expected(s, self.profile), self.expected(s, "MostAllocated"))
        )
        node = super().choose_node(column, s)
        self.steps.append((node, best))
        self.packed.append(packed)
        return node


def replay(profile: str, folder: Path) -> tuple[Checked, object, list[dict]]:
    twin = ReplayTwin.start(
        CLUSTER,
        {POOL: PER_GPU},
        profile,
        folder,
        target=WORKLOAD,
        claims=CLAIMS,
        devices={POOL: ("NVIDIA L40S", 49152)},
    )
    try:
        policy = Checked(twin, profile)
        result = run_one(CLUSTER, WORKLOAD, policy, SEED, share_rule="first-fit")
        claims = twin.claims()
    finally:
        twin.stop()
    return policy, result, claims


@pytest.mark.parametrize("profile", ["MostAllocated", "FragmentationAware"])
def test_the_allocator_takes_the_shares_on_the_simulators_best_node(profile: str, tmp_path: Path) -> None:
    toolchain("1.36")
    policy, result, claims = replay(profile, tmp_path / profile)
    names = {i: str(n).split("-", 1)[1] for i, n in enumerate(policy.ctx.cluster.names)}
    off = [(i, names.get(node), [names[b] for b in best]) for i, (node, best) in enumerate(policy.steps)
           if (node < 0) != (not best) or (node >= 0 and node not in best)]  # fmt: skip
    bound = [node for node, _ in policy.steps if node >= 0]
    # a few dozen pods, some of which find no room (the protocol asks 1.3x the GPUs)
    assert len(policy.steps) >= 24 and 0 < len(bound) < len(policy.steps), policy.steps
    assert not off, f"pods the real scheduler placed off the simulator's best nodes: {off}"
    if (
        profile == "FragmentationAware"
    ):  # the extender changed where pods went: the profile alone packs elsewhere
        moved = [i for i, ((node, _), packed) in enumerate(zip(policy.steps, policy.packed, strict=True))
                 if node >= 0 and node not in packed]  # fmt: skip
        assert moved, "every pod went where MostAllocated alone would have put it"

    # every bound pod's claim was allocated by the scheduler, on the pod's node, with the shares it asked
    allocated = {}
    for claim in claims:
        asked = int(claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"][SHARES])
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
        assert len(results) == 1 and results[0]["driver"] == DRIVER, claim
        assert int(results[0]["consumedCapacity"][SHARES]) == asked, claim
        allocated[claim["metadata"]["name"]] = results[0]["pool"]
    assert sorted(allocated.values()) == sorted(names[n] for n in bound)
    assert policy.claimed == len(bound) and policy.devices_differ == 0, (
        policy.claimed,
        policy.devices_differ,
    )

    # beside it, the in-process simulator's own run on the seed (its tie-break, FGD with the trace's target)
    sim = run_one(CLUSTER, WORKLOAD, "FGD" if profile == "FragmentationAware" else "MostAllocated", SEED,
                  params=None if profile == "FragmentationAware" else {"gpu": 0, "shared": 0},
                  share_rule="first-fit")  # fmt: skip
    print(f"{profile}: twin {result.unallocated(100):.2f} % unallocated, {result.failed} failed; "  # type: ignore[attr-defined]
          f"simulator {sim.unallocated(100):.2f} %, {sim.failed} failed")  # fmt: skip


def test_invoke_simulate_twin_replays_a_stack_of_dra_shares_through_claims(
    shared_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`invoke simulate --stack --twin` on metal with both pools at `dra-shares`: the share rule the stack replay
    decides (first-fit) drives the twin too, whose pods claim, and the report counts the claims."""
    import yaml

    toolchain("1.36")
    config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    pools = [{k: v for k, v in p.items() if k != "sharing"} | {"sharing": "dra-shares"}
             for p in config["gpufleet:nodePools"]]  # fmt: skip
    cluster = {**config["gpufleet:cluster"], "kubernetesVersion": "1.36"}
    path = stack_variant(tmp_path_factory, "metal", "metal-all-shares", cluster=cluster, nodePools=pools)
    out = tmp_path_factory.mktemp("simulate")
    pods = shared_dir / "traces" / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    argv = [sys.executable, "-m", "invoke", "simulate", "--stack", str(path), "--twin", "--seeds", "42",
            "--pods", str(pods), "--json", str(out / "runs.json"), "--out", str(out / "sim")]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    simulated = {r["policy"]: r for r in json.loads((out / "runs.json").read_text())}
    real = {r["policy"]: r for r in json.loads((out / "runs.twin.json").read_text())}
    assert set(simulated) == {"FGD", "MostAllocated"} and set(real) == {"MostAllocated", "FragmentationAware"}
    report = (out / "sim" / "report.md").read_text()
    counted = re.findall(r"0 of (\d+) claiming pods got other GPUs", report)
    assert len(counted) == 2 and all(int(n) > 0 for n in counted), report
    for twin_name, sim_name in (("MostAllocated", "MostAllocated"), ("FragmentationAware", "FGD")):
        assert abs(real[twin_name]["allocated"][100] - simulated[sim_name]["allocated"][100]) <= 0.5, (
            real,
            simulated,
        )
