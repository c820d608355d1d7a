"""The dynamic simulator against the real thing: the same seeded jobs over time on the twin (the real Kueue
0.19.2 admitting against the stack's compiled ClusterQueues with BestEffortFIFO and cohort reclaim, the real
scheduler, kwok pods completing after their duration) and through `scheduler.sim.dynamic`, compared within the
bounds `twin.replay_bounds` holds (docs/simulation.md, "Checked against the twin", has what they mean and
`benchmarks/dynamic_replay_bounds.md` the runs they were set from). The null model on the same record, first
come first served with no borrowing and no preemption, must miss them.

The stack and load are `twin.replay_bounds`'s: the metal stack's H100 pool (4 nodes of 8 GPUs), two teams of 16
GPUs each that may borrow 8 from each other, about 1.4 times what the 32 GPUs serve, so queues form, teams
borrow and owners reclaim. The record goes to build/test-logs/dynamic-replay/<time>/ for re-analysis.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from infra.stackfile import load_stack
from tests.conftest import ROOT
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube
from twin.dynamic_replay import jittered, replay_on_twin, scaled_trace
from twin.replay_bounds import (
    DURATION_S,
    JOBS,
    NULL_MUST_MISS,
    RATE_PER_S,
    SEED,
    measures,
    missed,
    replay_stack,
)
from twin.replay_record import TRACE, analyse, load, save, trace_inputs

pytestmark = pytest.mark.alone

# every run's record, kept for `python -m twin.replay_record compare FOLDER` (docs/simulation.md)
RECORDS = ROOT / "build" / "test-logs" / "dynamic-replay"


@pytest.fixture(scope="module")
def replay_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kube, Path]]:
    path = tmp_path_factory.mktemp("stacks") / "Pulumi.replay.yaml"
    path.write_text(yaml.safe_dump(replay_stack(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())),
                                   sort_keys=False))  # fmt: skip
    twin = start_twin(tmp_path_factory, path, frameworks=True)  # as its bounds were calibrated
    try:
        yield Kube.of(twin), path
    finally:
        twin.stop()


def test_the_simulator_agrees_with_kueue_on_the_twin_and_the_null_model_does_not(
    replay_twin: tuple[Kube, Path], tmp_path: Path
) -> None:
    kube, stack = replay_twin
    spec = load_stack(stack)
    jobs = scaled_trace([t.name for t in spec.teams], jobs=JOBS, rate_per_s=RATE_PER_S, duration_s=DURATION_S,
                        seed=SEED)  # fmt: skip
    twin = replay_on_twin(kube.binary, kube.kubeconfig, jobs)
    folder = save(RECORDS / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), stack, jobs, twin)
    result, null = analyse(folder)
    arrivals, durations = trace_inputs(load(folder))
    held = [twin.held(j.index) for j in jobs]
    lag = [h - j.duration for h, j in zip(held, jobs, strict=True) if h is not None]
    ready = [r - j.duration for r, j in ((twin.ran(j.index), j) for j in jobs) if r is not None]
    report = {"record": str(folder), **measures(result), "missed": missed(result),
              "null_model": {**measures(null), "missed": missed(null)}, "comparison": asdict(result),
              "hold_lag_s": [round(float(np.percentile(lag, q)), 2) for q in (5, 50, 95)],
              "run_lag_s": [round(float(np.percentile(ready, q)), 2) for q in (5, 50, 95)] if ready else [],
              "twin_seconds": twin.seconds,
              # how far the simulator's own waits move with each arrival moved by up to 0.5 s (reported)
              "sim_jittered": jittered(spec, jobs, arrivals, durations, tmp_path)}  # fmt: skip
    (folder / "report.json").write_text(json.dumps(report, indent=1, default=list))
    print("\ndynamic replay:", json.dumps(report, default=list))
    assert (folder / TRACE).is_file(), report
    assert result.jobs == JOBS, report
    assert not missed(result), report
    # the control: the null model on the same record must miss the bounds that test queueing and preemption
    # (twin.replay_bounds.NULL_MUST_MISS says which and why), or the bounds would pass a scheduler that is not Kueue
    assert set(NULL_MUST_MISS) <= set(missed(null)), report
