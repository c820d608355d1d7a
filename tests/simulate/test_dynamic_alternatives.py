"""The approaches the stack's queues are compared with, as their users would run them: each one registered
function, checked on the stack's own world or a tiny hand-made one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infra.simulate.dynamic import stack_world
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.sim.dynamic import Jobs, Pool, Queue, Settings, World, simulate
from scheduler.sim.dynamic.alternatives import REGISTRY, alternative, partition_teams, team_gpus
from scheduler.sim.timed_traces import read_timed_pods
from tests.conftest import load_example

HEADER = "arrival,duration,cpu_milli,memory_mib,num_gpu,gpu_milli,pods\n"


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> World:
    """example-prod's world for 400 jobs: whole GPUs (1, 2, 4, 8) and shares of a GPU."""
    path = Path(tmp_path_factory.mktemp("trace")) / "jobs.csv"
    rows = [f"{i * 10},600,2000,8192,{[1, 2, 4, 8, 1][i % 5]},{[1000, 1000, 1000, 1000, 250][i % 5]},1"
            for i in range(400)]  # fmt: skip
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return stack_world(load_example("example-prod"), read_timed_pods(path), gpu_speed=True).world


def _gpus(world: World) -> int:
    return sum(len(p.nodes) * world.gpus_per_node(p) for p in world.pools)


def test_one_node_group_has_the_same_gpus_and_the_teams_quota_in_gpus(prod: World) -> None:
    """The seeds' "one node group" means the same cluster in one group: 80 GPUs of example-prod as 10 nodes of
    its largest type (8 H100s), each team's promised GPUs as its quota there; a share takes a whole GPU."""
    one = alternative(prod, "one-node-group", autoscale=True)
    assert len(one.pools) == 1 and _gpus(one) == _gpus(prod) == 80
    assert {q.name: q.nominal[one.pools[0].name] for q in one.queues} == {
        q.name: round(team_gpus(prod, q)) for q in prod.queues
    }
    assert (one.jobs.workload.gpu_milli == MILLI).all()
    r = simulate(one)
    assert r.started == prod.jobs.size


def test_lowest_power_first_tries_the_lowest_power_pool_first(prod: World) -> None:
    """The seeds' "lowest power first": every team's pools in order of the GPU's board power (A10G 150 W, L40S
    350 W, H100 700 W), and the job runs at that GPU's speed."""
    low = alternative(prod, "lowest-power-first", autoscale=True)
    watts = {p.name: p.gpu_power_w for p in low.pools}
    for q in low.queues:
        assert [watts[f] for f in q.flavors] == sorted(watts[f] for f in q.flavors)
    speed = {p.name: p.speed for p in low.pools}
    assert speed["l40s-infer"] < speed["h100-train"]


def test_a_static_partition_gets_only_work_it_can_run(prod: World) -> None:
    """Under static partitions a job goes to a team with quota in a pool it accepts whose nodes hold its pod
    (batch has no whole-GPU quota, inference's L40S nodes hold 4 GPUs: their other jobs go elsewhere); the
    stack's own draw keeps the team it gave."""
    team = partition_teams(prod)
    owns = [{f for f, n in q.nominal.items() if n > 0} for q in prod.queues]
    specs = prod.jobs.workload.gpu_spec
    assert all(owns[t] & set(specs[j].split("|")) for j, t in enumerate(team.tolist()))
    inference = [q.name for q in prod.queues].index("inference")
    assert not (prod.jobs.workload.num_gpu[team == inference] > 4).any()
    moved = team != prod.jobs.queue
    assert moved.any() and not moved.all()
    r = simulate(alternative(prod, "static-partitions", autoscale=False))
    assert r.never_started == 0


def _tiny() -> World:
    """Two teams with 4 GPUs each on two 4-GPU nodes; team 0 sends four 2-GPU jobs of 100 s at t=0, team 1
    nothing: borrowing runs them all at once."""
    cluster = Cluster.build(["a-0", "a-1"], [64000] * 2, [262144] * 2, [4] * 2, ["a"] * 2)
    wl = Workload.build([1000] * 4, [1024] * 4, [2] * 4, [MILLI] * 4, ["a"] * 4)
    jobs = Jobs(np.zeros(4), np.full(4, 100.0), np.ones(4, dtype=np.int64), np.zeros(4, dtype=np.int64),
                np.full(4, 100, dtype=np.int64), wl)  # fmt: skip
    queues = (Queue("a-team", ("a",), {"a": 4}), Queue("b-team", ("a",), {"a": 4}))
    return World(cluster, (Pool("a", (0, 1)),), queues, jobs, Settings(autoscale=False, requeue_batch_s=0))


def test_the_null_model_loses_to_the_stacks_queues() -> None:
    """First come first served without borrowing leaves team 1's GPUs idle while team 0 queues: two jobs wait
    100 s, where the stack's queues borrow and start all four at once."""
    null = simulate(alternative(_tiny(), "null-fifo", autoscale=False))
    stack = simulate(alternative(_tiny(), "kueue-mostallocated", autoscale=False))
    assert (null.queued_mean_s, stack.queued_mean_s) == (50.0, 0.0)
    assert null.blocked_policy_gpu_hours > stack.blocked_policy_gpu_hours == 0


def test_every_alternative_says_what_it_changes() -> None:
    for a in REGISTRY.values():
        assert len(a.description) > 20, a.name
