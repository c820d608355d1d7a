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
    got = np.bincount(world.jobs.queue, minlength=len(names)) / world.jobs.size
    promised = {"llm-training": 24, "research": 20, "inference": 16, "batch": 20}
    for team, gpus in promised.items():
        assert abs(got[names.index(team)] - gpus / 80) < 0.02, (team, got[names.index(team)])
