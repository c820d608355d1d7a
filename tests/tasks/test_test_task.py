"""`invoke test`: the reference data is checked first (offline, a run used to fail after minutes of pip, ruff
and mypy with a raw download error and no hint), each phase announces itself, the toolchain builds in the
background and is joined before the tests that need it, and a failing tier fails the run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from invoke import Exit, MockContext, Result

import tasks
from infra.errors import Interrupted
from tests import phases
from tests.support import eventually


def no_build(_py: str) -> phases.Build:
    return phases.Build(None, Path("unused"), "cached")


def test_missing_reference_data_stops_before_lint_and_says_how_to_provide_it() -> None:
    c = MockContext(
        run={re.compile(r".*benchmarks/reference_data\.py.*"): Result(exited=2, stderr="cannot download")},
        repeat=True,
    )
    with pytest.raises(Exit) as stopped:
        phases.run(c, build=no_build)
    assert stopped.value.code == 2
    message = str(stopped.value.message)
    assert "GPUFLEET_SHARED" in message and "--mirror" in message
    commands = [call.args[0] for call in c.run.call_args_list]
    assert len(commands) == 1 and "reference_data.py" in commands[0]  # no ruff, mypy or pytest ran


def test_each_phase_is_announced_in_order_and_timed(capsys: pytest.CaptureFixture[str]) -> None:
    c = MockContext(run={re.compile(r".*"): Result(stdout="/data\n")}, repeat=True)
    phases.run(c, build=no_build)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("==> ")]
    n = len(phases.PHASES)
    names = [re.sub(rf"^==> \[\d+/{n}\] (.*) \(\d+ s\)$", r"\1", line) for line in lines]
    assert names == list(phases.PHASES)
    assert [int(re.search(rf"\[(\d+)/{n}\]", line).group(1)) for line in lines] == list(range(1, n + 1))  # type: ignore[union-attr]
    assert "phase times:" in out and all(f"  {name}" in out for name in phases.PHASES)
    assert all(re.search(rf"^  {re.escape(name)} +\d+ s +\d+ s CPU$", out, re.M) for name in phases.PHASES)
    commands = [call.args[0] for call in c.run.call_args_list]
    tiers = [command for command in commands if " -m pytest " in command]
    assert [(selection, workers) for _, selection, workers in phases.TIERS] == [
        ("not e2e and not toolchain and not alone", 2), ("alone", 1), ("(e2e or toolchain) and not alone", 4)]  # fmt: skip
    assert [f'-m "{t[1]}"' in command for t, command in zip(phases.TIERS, tiers, strict=True)] == [True] * 3
    assert "-n 2" in tiers[0] and "-n" not in tiers[1] and "-n 4" in tiers[2]
    assert any("mypy infra scheduler twin" in command for command in commands)


def test_a_failing_tier_fails_the_run_after_both_tiers_ran() -> None:
    c = MockContext(
        run={
            re.compile(r'.*pytest -m "not e2e.*'): Result(exited=1),
            re.compile(r".*"): Result(stdout="/data\n"),
        },
        repeat=True,
    )
    with pytest.raises(Exit) as stopped:
        phases.run(c, build=no_build)
    assert stopped.value.code == 1
    assert sum(" -m pytest " in call.args[0] for call in c.run.call_args_list) == 3


def test_a_selection_that_one_tier_does_not_reach_is_not_a_failure() -> None:
    """`invoke test --pytest-args '-k spec'` selects no test of the twin tier: pytest's exit 5 there is fine."""
    c = MockContext(
        run={
            re.compile(r'.*pytest -m "(\(e2e|alone).*'): Result(exited=phases.NO_TESTS),
            re.compile(r".*"): Result(stdout="/d\n"),
        },
        repeat=True,
    )
    phases.run(c, "-k spec", build=no_build)


def test_the_task_is_the_phases() -> None:
    assert "tests/phases.py" in (tasks.test.__doc__ or "")


def test_a_phase_is_charged_the_cpu_its_processes_used() -> None:
    """The CPU column is what the phase's child processes burnt, so a phase that waits shows little CPU."""
    clock = phases.Clock()
    clock.phase("mypy")
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"],
                   check=True)  # fmt: skip
    clock.phase("import contracts")
    waited = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.4)"])
    waited.wait()
    clock.close()
    assert clock.cpu["mypy"] >= 0.35 and clock.cpu["import contracts"] < 0.3, clock.cpu


def _beside(tmp_path: Path, codes: dict[str, str], calls: list[tuple[object, ...]]) -> phases.Starter:
    """A stand-in starter for the background tiers: a real child process running ``codes[name]``, its output in
    a log of that name; each call records the tier's name, selection, arguments, data folder and workers, and
    whether every tier started before it had ended by then."""
    started: list[phases.Background] = []

    def start(py: str, name: str, selection: str, args: str, shared: str, workers: int) -> phases.Background:
        calls.append(
            (name, selection, args, shared, workers, all(t.process.poll() is not None for t in started))
        )
        log = tmp_path / f"{name}.log"
        with log.open("wb") as out:
            child = subprocess.Popen(
                [sys.executable, "-c", codes[name]], stdout=out, stderr=subprocess.STDOUT
            )
        started.append(phases.Background(child, log))
        return started[-1]

    return start


def cached(_py: str) -> phases.Build:
    return phases.Build(None, Path("unused"), "cached", cached=True)


def test_with_the_toolchain_built_the_calibrated_tier_runs_beside_the_first_and_the_e2e_tier_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With every component built before the run, the calibrated module starts in the background before the
    tier without the toolchain, and the e2e tier in the background once the calibrated module has ended (never
    beside its twin); each is joined in its phase, its output printed there and its own run's wall time in the
    summary; only the first tier goes through the foreground."""
    calls: list[tuple[object, ...]] = []
    gate = tmp_path / "gate"  # the calibrated stand-in runs until the first tier has run (a FIFO blocks it)
    os.mkfifo(gate)
    codes = {
        "calibrated": f"open({str(gate)!r}).read(); print('calibrated output')",
        "e2e": "print('e2e output')",
    }

    commands: list[str] = []

    class FirstTierOpensTheGate(MockContext):
        def run(self, command: str, **kwargs: object) -> Result:
            commands.append(command)
            if " -m pytest " in command:
                gate.write_text("go")
            return Result(stdout="/data\n")

    phases.run(FirstTierOpensTheGate(), "-k x", build=cached, beside=_beside(tmp_path, codes, calls))
    out = capsys.readouterr().out
    assert calls == [("calibrated", "alone", "-k x", "/data", 1, True),
                     ("e2e", "(e2e or toolchain) and not alone", "-k x", "/data", 4, True)]  # fmt: skip
    tiers = [command for command in commands if " -m pytest " in command]
    assert len(tiers) == 1 and '-m "not e2e' in tiers[0], tiers
    joined = out.index("] pytest calibrated (joined)")
    assert out.index("calibrated output") > joined > out.index("] pytest without the toolchain")
    assert out.index("e2e output") > out.index("] pytest on the toolchain") > joined
    assert re.search(r"^  pytest calibrated, its own run +\d+ s", out, re.M), out
    assert re.search(r"^  pytest on the toolchain, its own run +\d+ s", out, re.M), out


@pytest.mark.parametrize("failing", ["calibrated", "e2e"])
def test_a_failing_background_tier_fails_the_run(tmp_path: Path, failing: str) -> None:
    codes = {"calibrated": "pass", "e2e": "pass", failing: "raise SystemExit(1)"}
    c = MockContext(run={re.compile(r".*"): Result(stdout="/data\n")}, repeat=True)
    with pytest.raises(Exit) as stopped:
        phases.run(c, build=cached, beside=_beside(tmp_path, codes, []))
    assert stopped.value.code == 1


class _Interrupted(MockContext):
    """The first tier interrupted (Ctrl-C) once ``before()`` has returned."""

    def __init__(self, before: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self._before = before

    def run(self, command: str, **kwargs: object) -> Result:
        if " -m pytest " in command:
            self._before()
            raise KeyboardInterrupt
        return Result(stdout="/data\n")


WAITS_FOR_SIGINT = (
    "import signal\ntry:\n    print('ready', flush=True)\n    signal.pause()\n"
    "except KeyboardInterrupt:\n    raise SystemExit(130)"
)


def test_an_interrupt_stops_the_background_tier_and_the_e2e_tier_never_starts(tmp_path: Path) -> None:
    """Ctrl-C during the first tier stops the calibrated module too (SIGINT, as a terminal sends it), the e2e
    tier, which would start when the calibrated module ends, does not start, and the interrupt goes on up."""
    calls: list[tuple[object, ...]] = []
    start = _beside(tmp_path, {"calibrated": WAITS_FOR_SIGINT, "e2e": "pass"}, calls)
    started: list[phases.Background] = []

    def beside(*args: Any) -> phases.Background:
        started.append(start(*args))
        return started[-1]

    def calibrated_waits() -> None:
        # the interrupt comes once the child waits for it: one during its start-up is not the case tested
        eventually(lambda: "ready" in started[0].log.read_text(), "the background child waiting", 30)

    with pytest.raises(KeyboardInterrupt):
        phases.run(_Interrupted(calibrated_waits), build=cached, beside=beside)
    # by the SIGINT (130 from its handler, or -2 if it came before Python set one), not left running or killed
    assert started and started[0].process.returncode in (130, -signal.SIGINT), started
    assert [call[0] for call in calls] == ["calibrated"]


def test_an_interrupt_once_the_e2e_tier_runs_stops_it(tmp_path: Path) -> None:
    calls: list[tuple[object, ...]] = []
    start = _beside(tmp_path, {"calibrated": "pass", "e2e": WAITS_FOR_SIGINT}, calls)
    started: list[phases.Background] = []

    def beside(*args: Any) -> phases.Background:
        started.append(start(*args))
        return started[-1]

    def e2e_waits() -> None:
        eventually(
            lambda: len(started) == 2 and "ready" in started[1].log.read_text(), "the e2e tier waiting", 30
        )

    with pytest.raises(KeyboardInterrupt):
        phases.run(_Interrupted(e2e_waits), build=cached, beside=beside)
    assert started[1].process.returncode in (130, -signal.SIGINT), started


class _Terminated(MockContext):
    """A foreground tier whose command is running when SIGTERM's stop is raised in the wait for it, as invoke's
    runner raises it (it forwards only Ctrl-C to its command): ``started`` is given that command (a
    function: a context keeps copies of the values it is given)."""

    def __init__(self, started: Callable[[subprocess.Popen[bytes]], None]) -> None:
        super().__init__()
        self._started = started

    def run(self, command: str, **kwargs: object) -> Result:
        if " -m pytest " in command:
            ignores = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint(1, flush=True)\ntime.sleep(600)"
            command_ = subprocess.Popen([sys.executable, "-c", ignores], stdout=subprocess.PIPE)
            self._started(command_)
            assert command_.stdout is not None and command_.stdout.readline()  # it ignores SIGINT from here
            raise Interrupted(signal.SIGTERM)
        return Result(stdout="/data\n")


def test_a_stop_in_a_foreground_tier_stops_its_command(tmp_path: Path) -> None:
    """SIGTERM while a tier runs in the foreground (the first tier; on a machine that built the toolchain, the
    calibrated module and the e2e tier too) stops that tier's command, even one that ignores the interrupt,
    and the stop goes on up: the cold run of a clean clone left its calibrated module running."""
    started: list[subprocess.Popen[bytes]] = []
    with pytest.raises(Interrupted):
        phases.run(_Terminated(started.append), build=no_build, beside=_beside(tmp_path, {}, []))
    assert started and started[0].wait(timeout=10) == -signal.SIGKILL
