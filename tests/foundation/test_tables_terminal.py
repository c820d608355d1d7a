"""Every command's table in ordinary terminal widths: no value is ever cut.

Rich cuts a word that does not fit its column with an ellipsis (Rich docs, "Tables": column `overflow`, default
"ellipsis"). Each table here is built from what the real code produces (the simulator's results of a small real
run, the Slurm plan of an example stack, preflight's findings against the loopback AWS server, usage rows of the
report's own data classes) and printed at 80 and 120 columns: no "…", no line wider than the terminal, every word
of every cell printed whole, and the table form kept wherever its words fit side by side.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pytest
from rich.console import Console

from infra.monitoring.usage import Row, UsageReport
from infra.monitoring.usage_report import print_report
from infra.preflight import Finding, Severity, run_preflight
from infra.preflight.report import FOLD_OVER, HEAD, findings_rows, print_findings
from infra.simulate.report import (
    SUMMARY_HEAD,
    TWIN_HEAD,
    print_summary,
    print_twin_runs,
    summary_rows,
    twin_rows,
)
from infra.simulate.stack import route, stack_model
from infra.slurm.plan import print_slurm_plan, slurm_plan_rows
from infra.tables import Cell, narrowest, plain, print_table
from scheduler import sim
from scheduler.sim import RunResult
from tests.conftest import load_example

WIDTHS = [80, 120]
Simulated = tuple[str, sim.Cluster, sim.Workload, list[RunResult]]


@dataclass(frozen=True)
class Shown:
    """One table as a command prints it: its header and cells (plain text), the text printed, how it was asked
    to lay out (`infra.tables.print_table`'s `no_wrap` and `fold_over`), and the columns whose header names the
    record form does not print (the command names its records itself, as "account vision  partition h100")."""

    head: Sequence[str]
    rows: Sequence[Sequence[str]]
    text: str
    no_wrap: frozenset[int] = frozenset()
    fold_over: int | None = None
    unnamed: frozenset[int] = frozenset()

    def fits(self, width: int) -> bool:
        return narrowest(self.head, self.rows, self.no_wrap, self.fold_over) <= width


def render(draw: Callable[[Console], object], width: int) -> str:
    out = io.StringIO()
    draw(Console(file=out, width=width, color_system=None, legacy_windows=False))
    return out.getvalue()


def texts(rows: Sequence[Sequence[Cell]]) -> list[list[str]]:
    console = Console(file=io.StringIO(), color_system=None)
    return [[plain(console, c) for c in row] for row in rows]


def folded(text: str) -> list[str]:
    """Where a folded word can be read back whole: each table column's lines joined, and the whole text joined
    (the record form: continuation lines hold only the value), whitespace removed."""
    lines = [line.split("│")[1:-1] for line in text.splitlines() if line.count("│") > 1]
    columns = ["".join(parts) for parts in zip(*lines, strict=False)] if lines else []
    return ["".join(c.split()) for c in [*columns, text]]


def assert_whole(shown: Sequence[Shown], width: int) -> None:
    """No ellipsis, no line past the width, every word of every header and cell printed whole (but a word over
    `fold_over`, or wider than the terminal's record form can hold, which may fold with every character kept);
    a table (Rich's heavy header border `┏`) exactly where the words fit side by side."""
    for table in shown:
        assert "…" not in table.text
        long = [line for line in table.text.splitlines() if len(line) > width]
        assert not long, long
        as_table = "┏" in table.text
        assert as_table == table.fits(width), (width, table.head)
        words, joined = set(table.text.split()), folded(table.text)
        head = [h for i, h in enumerate(table.head) if as_table or i not in table.unnamed]
        for cell in [*head, *(c for row in table.rows for c in row)]:
            missing = [w for w in cell.split() if w not in words]
            cut = [
                w
                for w in missing
                if len(w) <= (table.fold_over or width // 2) or not any(w in j for j in joined)
            ]
            assert not cut, (width, cell, cut)


# ---- invoke simulate ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Simulated:
    """A small real run on example-prod's cluster as the stack deploys it, every policy the simulator has
    (FGD-Extender-DRA's name the longest, run under the DRA allocator's first-fit rule it requires), two seeds,
    as `invoke simulate --stack example-prod` runs it."""
    rows = ["4000,16384,1,1000,", "2000,8192,1,500,", "1000,1024,0,0,", "8000,32768,4,1000,"] * 6
    pods = tmp_path_factory.mktemp("sim") / "pods.csv"
    pods.write_text("cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "\n".join(rows) + "\n")
    spec = load_example("example-prod")
    model = stack_model(spec)
    workload, _ = route(model, sim.read_pods(str(pods)), spec)
    claims = "FGD-Extender-DRA"
    results = [
        result
        for policies, rule in (
            ([p for p in sorted(sim.REGISTRY) if p != claims], "distributed"),
            ([claims], "first-fit"),
        )
        for result in sim.run_many(
            model.cluster,
            workload,
            policies,
            [42, 43],
            processes=1,
            params={model.strategy: model.weights},
            share_rule=rule,
        )
    ]
    return spec.stack, model.cluster, workload, results


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_summary_never_cuts_a_value(simulated: Simulated, width: int) -> None:
    name, cluster, workload, results = simulated
    text = render(lambda c: print_summary(c, name, cluster, workload, results), width)
    shown = Shown(SUMMARY_HEAD, summary_rows(results), text)
    assert_whole([shown], width)
    assert "┏" in text  # five short columns: a table at 80 columns already


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_twin_table_never_cuts_a_value(simulated: Simulated, width: int) -> None:
    """`--twin`: the real scheduler's replays (what `twin.replay.replay_stack` returns: a RunResult of the
    profile's name and a rate) beside the simulator's policies that model them."""
    from twin.replay import TwinRun

    name, _, _, results = simulated
    model_of = {"MostAllocated": "MostAllocated", "FragmentationAware": "FGD-Extender"}
    runs = [
        TwinRun(replace(r, policy=profile), pods_per_second=41.3)
        for profile, policy in model_of.items()
        for r in results
        if r.policy == policy
    ]
    text = render(lambda c: print_twin_runs(c, runs, results, name), width)
    shown = Shown(TWIN_HEAD, twin_rows(runs, results), text)
    assert len(shown.rows) == 4
    assert_whole([shown], width)
    assert "┏" in text


# ---- invoke plan --stack metal-slurm: the Slurm table -----------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_slurm_plan_never_cuts_a_value(width: int) -> None:
    spec = load_example("metal-slurm")
    head, rows = slurm_plan_rows(spec)
    assert rows
    text = render(lambda c: print_slurm_plan(spec, c), width)
    assert_whole([Shown(head, rows, text, unnamed=frozenset({0, 1}))], width)
    if width >= 120:
        assert "┏" in text


# ---- invoke usage ----------------------------------------------------------------------------------------


def usage_report() -> UsageReport:
    """A week of example-prod as `build_report` fills it: its teams and pools, GPU-hours in the thousands, costs
    in the tens of thousands, unknowns as None ("-"), waits in seconds, minutes and hours."""
    spec = load_example("example-prod")
    end = 1767225600.0
    teams = [
        Row(
            t.name,
            4032.0 - 900 * i,
            3120.4 - 800 * i,
            911.6 - 100 * i,
            27740.16 - 6000 * i,
            4032.0,
            45.0,
            7300.0,
        )
        for i, t in enumerate(spec.teams)
    ]
    teams[-1] = replace(teams[-1], used_h=None, idle_h=None, wait_p50_s=None, wait_p95_s=None)
    pools = [
        Row(p.name, 1344.0 * (i + 1), 1000.5, 343.5, 9246.72 * (i + 1), None, 300.0, 1500.0)
        for i, p in enumerate(spec.node_pools)
    ]
    return UsageReport(
        stack=spec.stack,
        prometheus="http://localhost:9090",
        since="7d",
        start=end - 7 * 86400 + 60,
        end=end,
        step=60.0,
        teams=teams,
        pools=pools,
        notes=["no DCGM utilisation for pool h100-mig: used and idle GPU-hours are unknown there"],
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_usage_never_cuts_a_value(width: int) -> None:
    from infra.monitoring.usage_report import COLUMNS, cell

    report = usage_report()
    text = render(lambda c: print_report(report, c), width)
    head = [h for h, _, _ in COLUMNS]
    parts = text.split("GPU usage per pool")
    shown = [
        Shown(
            ["team", *head],
            [[r.name, *(cell(r, a, f) for _, a, f in COLUMNS)] for r in report.teams],
            parts[0],
        ),
        Shown(
            ["pool", *head],
            [[r.name, *(cell(r, a, f) for _, a, f in COLUMNS)] for r in report.pools],
            parts[1],
        ),
    ]
    assert_whole(shown, width)
    if width >= 120:
        assert "┏" in parts[0] and "┏" in parts[1]


# ---- invoke preflight ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def preflight_findings(tmp_path_factory: pytest.TempPathFactory) -> list[Finding]:
    """example-prod against the loopback AWS server with a quota too small, no capacity reservations and an AMI
    release that does not exist: errors with their fixes (AWS CLI commands) beside the checks that passed."""
    import socket

    from infra.stackfile import load_stack
    from tests.preflight.conftest import DEPLOYER, fake_aws_cli, isolate_aws_env
    from tests.preflight.fakeaws import CURRENT, FakeAws, fake_aws_server
    from tests.preflight.helpers import stack_doc, write_stack

    tmp = tmp_path_factory.mktemp("preflight")
    with socket.socket() as sock:  # a loopback port nothing listens on: no public registry is reached
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with fake_aws_server() as url, pytest.MonkeyPatch.context() as mp:
        isolate_aws_env(mp, tmp)
        fake_aws_cli(mp, tmp)
        for var, value in {
            "GPUFLEET_DEPLOYER_ADDRESS": DEPLOYER,
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "GPUFLEET_REGISTRY_MIRRORS": f"ghcr.io={closed},registry.k8s.io={closed}",
        }.items():
            mp.setenv(var, value)
        fake = FakeAws(url)
        CURRENT.append(fake)
        try:
            fake.seed_clean(load_example("example-prod"))
            fake.seed_quota("L-3819A6DF", 64)
            fake.reservations.clear()
            doc = stack_doc("example-prod")
            doc["config"]["gpufleet:versions"] = {"bottlerocketNvidiaRelease": "1.49.0-deadbeef"}
            findings = run_preflight(load_stack(write_stack(tmp, "many", doc)))
        finally:
            CURRENT.remove(fake)
            fake.reset()
    return findings


@pytest.mark.parametrize("width", WIDTHS)
def test_preflight_never_cuts_a_value(preflight_findings: list[Finding], width: int) -> None:
    findings = preflight_findings
    assert {f.severity for f in findings} >= {Severity.ERROR, Severity.OK}
    text = render(lambda c: print_findings(findings, c, "many"), width)
    table = text.split("commands from the fixes above:")[0]
    rows = texts(findings_rows(findings))
    assert_whole([Shown(HEAD, rows, table, frozenset({0}), FOLD_OVER, unnamed=frozenset({0, 1}))], width)
    assert "┏" not in table  # three columns of sentences do not fit beside each other
    wide = render(lambda c: print_findings(findings, c, "many"), 160)  # a pipe's console (tasks.console)
    assert_whole([Shown(HEAD, rows, wide.split("commands from")[0], frozenset({0}), FOLD_OVER)], 160)
    assert "┏" in wide


# ---- the shared rule -------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_a_long_word_is_never_cut_where_rich_would_cut_it(width: int) -> None:
    """Rich shrinks the widest columns first: one column a long unbroken word (an ARN), the other a sentence,
    and at 80 and at 120 columns Rich's own layout cuts the ARN (`arn:aws:iam::123456789012:role/gpufl…`)
    though the sentence could wrap onto more lines. The widths `print_table` sets keep every word whole."""
    arn = "arn:aws:iam::123456789012:role/gpufleet-prod-karpenter-node"
    sentence = " ".join(["the role the nodes of this pool join the cluster with"] * 2)
    head, rows = ["role", "what"], [[arn, sentence]]
    text = render(lambda c: print_table(c, "roles", head, rows), width)
    assert_whole([Shown(head, rows, text)], width)
    assert "┏" in text
