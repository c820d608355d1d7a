"""Every ClusterQueue the stack compiles is its own queue in the dynamic simulation, with its own flavors:
Kueue assigns a workload only flavors of its own ClusterQueue (v0.19.2
pkg/scheduler/flavorassigner/flavorassigner.go:1061-1110), so a team's topology pool takes only the jobs
submitted to its `topology` LocalQueue."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.simulate.dynamic import stack_world
from scheduler.sim.dynamic.engine import Simulation
from scheduler.sim.errors import TraceError
from scheduler.sim.timed_traces import read_timed_pods
from tests.conftest import load_example

HEADER = "arrival,duration,cpu_milli,memory_mib,num_gpu,gpu_milli,pods,team,queue\n"


def _trace(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


def test_only_jobs_of_the_topology_queue_reach_the_topology_pool(tmp_path: Path) -> None:
    """example-prod: research's default queue lists l40s-infer, h100-mig and a10g-batch, its topology queue
    h100-train. Ten 4-GPU jobs to each: the default queue's run on L40S nodes (never h100-train), the
    topology queue's on h100-train."""
    rows = [f"{i},600,4000,16384,4,1000,1,research,{'topology' if i % 2 else 'default'}" for i in range(20)]
    world = stack_world(load_example("example-prod"), read_timed_pods(_trace(tmp_path, rows))).world
    names = [q.name for q in world.queues]
    assert "h100-train" not in world.queues[names.index("research")].flavors
    assert world.queues[names.index("research-topology")].flavors == ("h100-train",)
    sim = Simulation(world, check=True)
    result = sim.run()
    assert result.started == 20
    pool = {p.name: i for i, p in enumerate(world.pools)}
    ran_on = [sim.jobs[j].pool for j in range(20)]
    assert all(p == pool["h100-train"] for p in ran_on[1::2])
    assert all(p != pool["h100-train"] for p in ran_on[0::2])


def test_a_topology_job_of_a_team_without_a_topology_queue_is_refused(tmp_path: Path) -> None:
    spec = load_example("example-karpenter")
    with pytest.raises(TraceError, match="team 'research' has no topology queue"):
        stack_world(spec, read_timed_pods(_trace(tmp_path, ["0,60,1000,1024,1,1000,1,research,topology"])))
    with pytest.raises(TraceError, match="queue 'gpu' is not a LocalQueue"):
        stack_world(spec, read_timed_pods(_trace(tmp_path, ["0,60,1000,1024,1,1000,1,research,gpu"])))
