"""The dynamic replay's re-analysis, without a twin: a record kept from a real twin run
(`records/dynamic-replay/`: the twin's Workload watch, the 200 planned jobs and the stack it ran) is read back,
turned into the simulator's trace, and compared again, the simulator and the null model alike."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from twin.replay_bounds import JOBS, NULL_MUST_MISS, missed
from twin.replay_record import HELD, RAN, TRACE, analyse, arrival_trace, load, save, trace_inputs

RECORD = Path(__file__).parent / "records" / "dynamic-replay"


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """A copy of the kept record (the analysis writes its comparisons beside it)."""
    return Path(shutil.copytree(RECORD, tmp_path / "record"))


def test_a_record_reads_back_as_it_was_written(tmp_path: Path) -> None:
    kept = load(RECORD)
    again = load(save(tmp_path / "again", kept.stack, kept.jobs, kept.twin))
    assert again.jobs == kept.jobs and again.twin == kept.twin
    assert len(kept.twin.finished) == len(kept.twin.ready) == JOBS and kept.twin.preemptions


def test_the_trace_rebuilt_from_the_record_is_the_one_the_twin_run_wrote(tmp_path: Path) -> None:
    rebuilt = arrival_trace(load(RECORD), tmp_path / "replay.csv", RAN)
    assert rebuilt.read_text() == (RECORD / TRACE).read_text()


def test_a_hold_is_the_run_and_the_twin_lag_in_starting_the_pods() -> None:
    """`held` durations add to `ran` ones the twin's time from `Admitted` to `PodsReady`: pod creation, binding
    and start, seconds on the twin, where the simulator models only placement."""
    record = load(RECORD)
    arrivals, held = trace_inputs(record, HELD)
    again, ran = trace_inputs(record, RAN)
    assert arrivals == again
    lags = [h - r for h, r in zip(held, ran, strict=True)]
    assert min(lags) >= 0 and sum(lags) / len(lags) > 0.5
    with pytest.raises(ValueError, match="accepted: held, ran"):
        trace_inputs(record, "planned")


def test_the_simulator_holds_every_bound_on_the_record_and_the_null_model_misses_them(record: Path) -> None:
    sim, null = analyse(record)
    assert sim.jobs == null.jobs == JOBS
    assert missed(sim) == []
    assert set(NULL_MUST_MISS) <= set(missed(null)), missed(null)
    assert not null.sim_preempted and not null.sim_reasons  # the null model never preempts
    assert (record / "comparison.json").is_file() and (record / "null-comparison.json").is_file()


def test_the_command_reanalyses_a_folder_and_names_what_each_side_misses(record: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "twin.replay_record", "compare", str(record)], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"{record} simulator misses: none" in lines
    null = next(line for line in lines if line.startswith(f"{record} null model (null-fifo) misses: "))
    assert all(name in null for name in NULL_MUST_MISS)


def test_a_folder_without_a_record_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "twin.replay_record", "compare", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"{tmp_path}: no Pulumi.<stack>.yaml; a replay record holds Pulumi.<stack>.yaml, jobs.json and "
        "twin-record.json"
    ]
