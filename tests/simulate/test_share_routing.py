"""A pod asking part of a GPU is routed as a team member submitting it would end up: it asks the resource whose
slice is the smallest that covers its fraction (else the largest), on pools with a node that holds its cores and
memory, and Kueue's flavor order of its team's ClusterQueue picks the pool among those exposing that resource. A routable pool no pod reaches is reported."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from infra.simulate.dynamic import stack_world
from infra.simulate.stack import route, stack_model
from infra.stackfile import parse_config
from scheduler import sim
from scheduler.sim import Workload
from scheduler.sim.dynamic.engine import Simulation
from scheduler.sim.timed_traces import read_timed_pods
from tests.conftest import ROOT, load_example

HEADER = "arrival,duration,cpu_milli,memory_mib,num_gpu,gpu_milli,pods,team,queue\n"


def _trace(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


def test_a_share_asks_the_slice_that_covers_it_else_the_largest_on_a_node_that_holds_it() -> None:
    """example-prod offers MIG 1g.10gb (1/7 of an H100, 142 milli) and A10G replicas (1/4, 250 milli): 100 and
    142 milli fit a MIG instance, 200 a replica, 600 no slice (the replica, the largest); a 300-milli share
    asking 16 cores asks the MIG instance, as the A10G nodes (g5.2xlarge) have 8. Each pool's unit is what the
    pod holds. No whole-GPU pod: both exclusive pools receive nothing, and the report says so."""
    prod = load_example("example-prod")
    model = stack_model(prod)
    pods = Workload.build([1000] * 4 + [16000], [1024] * 5, [1] * 5, [100, 142, 200, 600, 300])
    routed, routing = route(model, pods, prod)
    assert routed.gpu_spec == ("h100-mig", "h100-mig", "a10g-batch", "a10g-batch", "h100-mig")
    assert routed.gpu_milli.tolist() == [142, 142, 250, 250, 142]
    assert routing.unexpressed_milli == (600 - 250) + (300 - 142) and routing.overgiven_milli == 42 + 0 + 50
    said = "\n".join(routing.lines())
    assert "2 one unit of 250 milli-GPU (4 per GPU) of nvidia.com/gpu.shared on a10g-batch" in said
    assert "3 one unit of 142 milli-GPU (7 per GPU) of nvidia.com/mig-1g.10gb on h100-mig" in said
    assert routing.idle_pools == ("h100-train", "l40s-infer")
    assert "no GPU pod of the trace is routed to h100-train, l40s-infer: it receives nothing" in said


def _two_time_sliced_pools() -> object:
    """example-prod with a second A10G time-sliced pool, a10g-spare, in research's quota (batch's is a10g-batch)."""
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.example-prod.yaml").read_text())["config"])
    pools = config["gpufleet:nodePools"]
    batch = next(p for p in pools if p["name"] == "a10g-batch")
    pools.append({**copy.deepcopy(batch), "name": "a10g-spare", "maxSize": 2})
    research = next(t for t in config["gpufleet:teams"] if t["name"] == "research")
    research["quotas"]["a10g-spare"] = 2
    return parse_config(config, "test")


def test_shares_reach_the_pools_of_their_resource_in_each_teams_flavor_order(tmp_path: Path) -> None:
    """Two pools expose nvidia.com/gpu.shared at one size: a share may go to either, and each team's queue
    tries its own pool first (the team's quota before borrowing), so research's shares run on a10g-spare and
    batch's on a10g-batch; a share small enough for a MIG instance runs on h100-mig."""
    spec = _two_time_sliced_pools()
    rows = [f"{i},600,1000,2048,1,300,1,{'research' if i % 2 else 'batch'},default" for i in range(8)]
    rows += ["8,600,1000,2048,1,100,1,research,default", "9,600,1000,2048,1,100,1,batch,default"]
    made = stack_world(spec, read_timed_pods(_trace(tmp_path, rows)))  # type: ignore[arg-type]
    world = made.world
    assert world.jobs.workload.gpu_spec[:2] == ("a10g-batch|a10g-spare",) * 2
    sim = Simulation(world, check=True)
    assert sim.run().started == 10
    name = [p.name for p in world.pools]
    ran_on = [name[sim.jobs[j].pool] for j in range(10)]
    assert ran_on[:8] == ["a10g-spare" if i % 2 else "a10g-batch" for i in range(8)]
    assert ran_on[8:] == ["h100-mig", "h100-mig"]


def test_the_report_counts_the_pods_the_stacks_admission_policy_refuses() -> None:
    """example-prod's admission policy lets a pod ask, per unit, what a node offers pods over its units: 1.94
    cores and 7.59 GiB of an A10G replica (a g5.2xlarge's allocatable less its DaemonSets, 7,770m and 31,109
    MiB, over 4 replicas), 3.42 cores of a MIG 1g.10gb instance and 23.91 cores of a whole GPU (a p5.48xlarge's
    191,300m over 8). A 200-milli share asking 1.9 cores is admitted on its replica, one asking 2 cores is not;
    a 100-milli share asking 4 cores is not admitted on its MIG instance; a 1-GPU pod asking 30 cores is not, a
    2-GPU pod asking 30 is. The routes are unchanged; the report names the three."""
    prod = load_example("example-prod")
    model = stack_model(prod)
    pods = Workload.build(
        [1900, 2000, 4000, 30000, 30000], [1024] * 5, [1, 1, 1, 1, 2], [200, 200, 100, 1000, 1000]
    )
    routed, routing = route(model, pods, prod)
    assert routed.gpu_spec == ("a10g-batch", "a10g-batch", "h100-mig", "h100-train|l40s-infer",
                               "h100-train|l40s-infer")  # fmt: skip
    assert routing.refused == (("a10g-batch", 1), ("h100-mig", 1), ("h100-train|l40s-infer", 1))
    said = "\n".join(routing.lines())
    assert "3 GPU pods ask more cores or memory per GPU unit than the stack's admission policy admits" in said
    assert (
        "nvidia.com/gpu.shared 1.94 cores and 7.59 GiB" in said
        and "nvidia.com/mig-1g.10gb 3.42 cores" in said
    )
    assert "nvidia.com/gpu 23.91 cores" in said
    assert "1 for a10g-batch, 1 for h100-mig, 1 for h100-train|l40s-infer" in said


def test_the_docs_count_the_refused_pods_of_the_default_trace(shared_dir: Path) -> None:
    """docs/simulation.md states how many of openb's default trace's GPU pods example-prod and metal refuse as
    the trace asks them: the numbers routing reports."""
    text = " ".join((ROOT / "docs" / "simulation.md").read_text().split())
    pods = sim.read_pods(shared_dir / "traces" / "alibaba-gpu-v2023" / "openb_pod_list_default.csv")
    for name in ("example-prod", "metal"):
        spec = load_example(name)
        routed, routing = route(stack_model(spec), pods, spec)
        refused = dict(routing.refused)
        total = f"{sum(refused.values()):,} of {routed.size:,}"
        assert total in text, (name, total)
        for where, count in refused.items():
            assert f"{count:,} " in text, (name, where, count)
