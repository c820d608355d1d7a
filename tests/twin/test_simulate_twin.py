"""`invoke simulate --stack NAME --twin`, as a user runs it: the trace replayed through the real kube-scheduler
(the gpu-binpack profile, and FragmentationAware with the extender as its sidecar) on the stack's kwok nodes,
beside the in-process simulator, same protocol and seeds: placement replayed through the real scheduler.

The workload is the openb default trace (shared/traces, alibaba-gpu-v2023) on metal's 7 nodes: the protocol
stops at 100 % of the cluster's GPUs arrived, so one seed is some 150 pods. Ties are broken by each scheduler's
own rule, which is part of the result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.twin.conftest import toolchain


def test_the_real_scheduler_lands_within_half_a_point_of_the_simulator(
    shared_dir: Path, tmp_path: Path
) -> None:
    toolchain("1.35")
    pods = shared_dir / "traces" / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    out = tmp_path / "runs.json"
    argv = [sys.executable, "-m", "invoke", "simulate", "--stack", "metal", "--twin", "--seeds", "42",
            "--pods", str(pods), "--json", str(out)]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert "through the real scheduler" in done.stdout
    simulated = {r["policy"]: r for r in json.loads(out.read_text())}
    real = {r["policy"]: r for r in json.loads(out.with_suffix(".twin.json").read_text())}
    assert set(real) == {"MostAllocated", "FragmentationAware"}

    def at_100(run: dict) -> float:
        return 100.0 - run["allocated"][100]  # unallocated GPU % at 100 % arrived (RunResult.unallocated)

    for twin_name, sim_name in (("MostAllocated", "MostAllocated"), ("FragmentationAware", "FGD-Extender")):
        assert abs(at_100(real[twin_name]) - at_100(simulated[sim_name])) <= 0.5, (twin_name, real, simulated)
