"""How `invoke simulate --dynamic` gives a trace's jobs to the stack's teams when the trace names none."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infra.simulate.dynamic import stack_world
from scheduler.sim.timed_traces import read_timed_pods
from tests.conftest import load_example

HEADER = "arrival,duration,cpu_milli,memory_mib,num_gpu,gpu_milli,pods\n"


def test_teams_get_jobs_in_proportion_to_their_gpus_not_their_quota_units(tmp_path: Path) -> None:
    """example-prod promises llm-training 24 GPUs, research 8 + 8 + 4 (the 4 as 28 MIG slices), inference 16
    and batch 16 + 4 (as 64 time-sliced replicas and 28 MIG slices): 24 / 20 / 16 / 20 of 80 GPUs. Counted in
    quota units batch would get 92 of 176 (52 %) instead of 25 %."""
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "".join(f"{i},60,1000,1024,1,1000,1\n" for i in range(8000)))
    world = stack_world(load_example("example-prod"), read_timed_pods(path)).world
    names = [q.name for q in world.queues]
    per_queue = np.bincount(world.jobs.queue, minlength=len(names)) / world.jobs.size
    promised = {"llm-training": 24, "research": 20, "inference": 16, "batch": 20}
    for team, gpus in promised.items():
        got = sum(
            share
            for name, share in zip(names, per_queue, strict=True)
            if name.removesuffix("-topology") == team
        )
        assert abs(got - gpus / 80) < 0.02, (team, got)


def test_a_job_goes_to_the_queue_where_its_team_holds_quota_for_its_hardware(tmp_path: Path) -> None:
    """llm-training's only GPU quota is the H100 capacity block, compiled into its topology queue: its whole-GPU
    jobs that an H100 node can hold go there when the trace names no queue, as its members would submit them,
    instead of borrowing other teams' GPUs from its default queue while its own stand idle. A named queue is
    kept, and so is the default queue for a job its topology queue cannot run (a quarter of a GPU)."""
    path = tmp_path / "jobs.csv"
    rows = [
        "0,60,1000,1024,8,1000,1,llm-training,",  # 8 whole GPUs: an H100 node holds them
        "1,60,1000,1024,1,1000,1,llm-training,default",  # named: kept
        "2,60,1000,1024,1,250,1,llm-training,",  # a share: not on the H100 training pool
        "3,60,1000,1024,1,1000,1,research,",  # research holds L40S quota in its default queue
    ]
    path.write_text(HEADER.rstrip("\n") + ",team,queue\n" + "".join(row + "\n" for row in rows))
    world = stack_world(load_example("example-prod"), read_timed_pods(path)).world
    names = [q.name for q in world.queues]
    assert [names[q] for q in world.jobs.queue] == [
        "llm-training-topology",
        "llm-training",
        "llm-training",
        "research",
    ]
