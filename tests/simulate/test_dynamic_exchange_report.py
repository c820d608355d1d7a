"""`invoke simulate --dynamic` names the queues that evict each other's jobs in one pool, with the stack option
that ends it where the stack's fair sharing allows it (infra.simulate.dynamic_report), and names none under
`[LessThanInitialShare]`: on the two-pool exchange world, in the engine and as a stack through the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from infra.simulate.dynamic_report import REMEDY, exchange_line, exchange_rows, remedy
from scheduler.sim.dynamic import Settings, simulate
from scheduler.sim.dynamic.exchanges import AT_LEAST
from tests.conftest import ROOT
from tests.fair_sharing_exchange import DEFAULT, STRICT, exchange_stack
from tests.sim.test_dynamic_fair_sharing import FAIR, exchange_world
from tests.simulate.test_simulate_cli import invoke

OWN = "kueue-mostallocated"


def test_the_remedy_is_offered_where_the_first_strategy_runs_first() -> None:
    """`LessThanOrEqualToFinalShare` first is what lets equal borrowers evict each other; the strict strategy
    alone, or classical preemption, has no such exchange to end."""
    assert remedy(replace(FAIR, fair_preemption_strategies=DEFAULT)) == REMEDY
    assert remedy(replace(FAIR, fair_preemption_strategies=STRICT)) is None
    assert remedy(Settings(fair_sharing=False)) is None


def test_the_stacks_own_runs_name_the_exchange_and_the_others_do_not_repeat_it() -> None:
    world, _, _, _ = exchange_world(2, replace(FAIR, requeue_batch_s=1.0), a_s=300.0)
    run = simulate(world)
    results = {(OWN, True): run, (OWN, False): run, ("round-robin", True): run}
    rows = exchange_rows(results, OWN, world.settings)
    assert [(r["approach"], r["autoscaling"], r["pool"]) for r in rows] == [
        (OWN, True, "a"),
        (OWN, False, "a"),
    ]
    line = exchange_line(rows[0])
    a, b = rows[0]["first"], rows[0]["second"]
    assert {a, b} == {"t1", "t2"}
    assert f"{a} evicted {b}'s {rows[0]['first_evicted']:,} times" in line
    assert line.endswith(f": {REMEDY}")
    classical = exchange_rows(results, OWN, replace(world.settings, fair_sharing=False))
    assert classical[0]["remedy"] is None and "ends it" not in exchange_line(classical[0])


def _trace(path: Path) -> Path:
    """The exchange's jobs: t1 on 4 GPUs of m and t2 on 2 (equal weighted shares), pool a filled by the lender's
    10 replicas, t1's 4 and t2's 2 for 600 s, and t2's one more at t=10."""
    rows = [("t1", 1000, 3000.0)] * 4 + [("t2", 1000, 3000.0)] * 2 + [("lender", 500, 600.0)] * 10
    rows += [("t1", 500, 600.0)] * 4 + [("t2", 500, 600.0)] * 2
    lines = ["arrival,duration,cpu_milli,memory_mib,num_gpu,gpu_milli,pods,team"]
    lines += [f"0,{s},1000,4096,1,{milli},1,{team}" for team, milli, s in rows]
    lines.append("10,600,1000,4096,1,500,1,t2")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("strategies", [DEFAULT, STRICT], ids=["default", "strict"])
def test_the_cli_names_the_pair_and_the_remedy_only_where_they_exchange(
    tmp_path: Path, strategies: tuple[str, ...]
) -> None:
    stack = tmp_path / "Pulumi.exchange.yaml"
    metal = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    stack.write_text(yaml.safe_dump(exchange_stack(metal, strategies), sort_keys=False))
    out = tmp_path / "out"
    result = invoke("--dynamic", "--stack", str(stack), "--pods", str(_trace(tmp_path / "jobs.csv")),
                    "--out", str(out), "--json", str(tmp_path / "d.json"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = json.loads((tmp_path / "d.json").read_text())["exchanges"]
    report = (out / "report.md").read_text()
    if strategies == STRICT:
        assert found == [] and "evict each other's jobs" not in result.stdout
        assert f"None: no two queues evicted each other's jobs in one pool at least {AT_LEAST:,}" in report
        return
    assert {(r["pool"], r["first"], r["second"]) for r in found} <= {("a", "t1", "t2"), ("a", "t2", "t1")}
    assert {r["autoscaling"] for r in found} == {True, False}
    for row in found:
        assert min(row["first_evicted"], row["second_evicted"]) >= AT_LEAST and row["remedy"] == REMEDY
        assert exchange_line(row) in result.stdout and exchange_line(row) in report
