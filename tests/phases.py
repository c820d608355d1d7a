"""`invoke test`: every check and test, in phases, with the twin's toolchain built while the rest runs.

The order is chosen for the 2-core machine CI uses:

1. the reference data (seconds; without it nothing else is worth running);
2. the twin's toolchain, if anything of it is missing, starts building in the background (Go, tens of minutes
   cold; `benchmarks/twin_toolchain.md`), its output in `build/test-logs/toolchain.log`;
3. with the toolchain already built, the module whose bounds are calibrated on timings (`alone`: the dynamic
   replay, whose agreement with Kueue is measured in wait times) starts in the background on one worker, its
   output in `build/test-logs/calibrated.log`: it waits on real time (about two thirds of a core) and starts
   the only twin up while the next phases run, which start none; it takes about as long as they do together,
   so it starts first;
4. ruff, the formatter check, mypy and the import contracts;
5. the tests that need no toolchain (`not e2e and not toolchain`), two workers (pytest-xdist; tests that share a
   machine-wide resource carry an `xdist_group`, run with `--dist loadgroup`);
6. the toolchain build joined (its failure ends the run under CI=true; elsewhere the tests that need it skip);
7. the calibrated module joined and its output printed, or, where the toolchain was built in this run, run
   now with no other twin up;
8. the tests on the toolchain (`e2e or toolchain`), four workers, each with twins of its own, the monitoring
   chain among them (its bounds are a scrape interval per workload edge, not timings measured on a quiet
   machine: it passes with the tier's other twins beside it). With the toolchain built before the run, the tier
   starts in the background the moment the calibrated module ends, while the first tier finishes (its last
   minutes are its one-worker `slurm` group, one core idle), its output in `build/test-logs/e2e.log`, printed
   when it is joined. Twins wait on real time (Karpenter's consolidation, a deployment's rollout, Prometheus'
   scrapes and alert windows), so more workers than cores keep the cores busy: two workers left a third of the
   cores' time idle, three took the tier from 1,229 s to 939 s, four from 780 s to 677 s, at a peak of about 17
   of the machine's 24 GiB (`benchmarks/test_loop.md`).

Each phase prints a line when it starts and the run ends with the seconds each took; each tier lists its slowest
modules, and the seconds of every test go to `build/test-logs/durations.json` (copied to `tests/durations.json`,
they order the next runs' groups, the longest first).
"""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from invoke import Context, Exit

from infra.processes import descendants, stop_pids, stop_tree
from tests.durations import MEASURED, recorded_durations, write_measured

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "build" / "test-logs"
PHASES = (
    "reference data",
    "twin toolchain (background)",
    "pytest calibrated (started)",
    "ruff check",
    "ruff format",
    "mypy",
    "import contracts",
    "pytest without the toolchain",
    "twin toolchain (joined)",
    "pytest calibrated (joined)",
    "pytest on the toolchain",
)
# The tiers: (phase, marker expression, workers). Tests that share a machine-wide resource (a folder of the clone,
# the Slurm daemons, a Debian root) carry an `xdist_group` and run on one worker (`--dist loadgroup`).
TIERS = (
    ("pytest without the toolchain", "not e2e and not toolchain and not alone", 2),
    ("pytest calibrated (joined)", "alone", 1),
    ("pytest on the toolchain", "(e2e or toolchain) and not alone", 4),
)
CALIBRATED = TIERS[1]
ON_TOOLCHAIN = TIERS[2]
STOP_GRACE_S = (
    60  # an interrupted background tier's time to stop its twins (pytest's teardown) before SIGKILL
)
# pytest's exit code when a selection collects nothing (a -k that names tests of one tier only)
NO_TESTS = 5


def children_cpu() -> float:
    """CPU seconds (user and system) of every finished child process and their waited-for descendants: a
    phase's share of it, beside its wall time, says how far the 2 cores were busy (CPU / wall near 2: bound by
    the cores; well below: waiting on something)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


@dataclass
class Clock:
    """Announces each phase and keeps how long each took, in wall time and in its processes' CPU time."""

    started: float = field(default_factory=time.monotonic)
    times: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    current: str = ""
    since: float = 0.0
    cpu_since: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)  # wall times of runs beside the phases

    def phase(self, name: str) -> None:
        self.close()
        self.current, self.since, self.cpu_since = name, time.monotonic(), children_cpu()
        elapsed = self.since - self.started
        print(f"==> [{PHASES.index(name) + 1}/{len(PHASES)}] {name} ({elapsed:.0f} s)", flush=True)

    def close(self) -> None:
        if self.current:
            self.times[self.current] = time.monotonic() - self.since
            self.cpu[self.current] = children_cpu() - self.cpu_since
            self.current = ""

    def summary(self) -> str:
        self.close()
        w = max(len(name) for name in [*self.times, *self.extra, "total"])
        rows = [f"  {name:<{w}} {seconds:7.0f} s  {self.cpu[name]:7.0f} s CPU"
                for name, seconds in self.times.items()]  # fmt: skip
        rows += [
            f"  {name:<{w}} {seconds:7.0f} s  (beside the phases above)"
            for name, seconds in self.extra.items()
        ]
        total = (
            f"  {'total':<{w}} {time.monotonic() - self.started:7.0f} s  {sum(self.cpu.values()):7.0f} s CPU"
        )
        return "\n".join(["phase times: (wall, and the CPU time of the phase's processes)", *rows, total])


@dataclass
class Build:
    """The toolchain build running in the background (None: nothing to build, or no Go); ``cached``: every
    component was built before this run."""

    process: subprocess.Popen[bytes] | None
    log: Path
    note: str
    cached: bool = False

    def join(self) -> int:
        if self.process is None:
            return 0
        return self.process.wait()


def start_build(py: str) -> Build:
    """Start `python -m twin.toolchain` when Go is there and a component is missing."""
    log = LOGS / "toolchain.log"
    if shutil.which("go") is None:
        return Build(None, log, "Go is not installed: the tests on the toolchain cannot run")
    from twin.toolchain.build import components, is_built

    if all(is_built(c) for c in components()):
        return Build(None, log, "cached", cached=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [py, "-m", "twin.toolchain"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    return Build(process, log, f"building what is missing, output in {log.relative_to(ROOT)}")


@dataclass
class Background:
    """A tier running beside the others, its output in ``log`` and its tests' seconds in ``durations`` (where
    it records them); ``started`` on the monotonic clock."""

    process: subprocess.Popen[bytes]
    log: Path
    durations: Path | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None  # when it was seen to end, if before its join

    def join(self) -> int:
        return self.process.wait()

    def stop(self) -> None:
        """SIGINT, as Ctrl-C would send it (pytest tears its twins down), then, after STOP_GRACE_S, SIGKILL for it
        and whatever it started that is left."""
        if self.process.poll() is None:
            stop_tree(self.process, STOP_GRACE_S)


# (python, name of its log, marker expression, pytest arguments, reference data folder, workers)
Starter = Callable[[str, str, str, str, str, int], Background]


def start_background(py: str, name: str, selection: str, args: str, shared: str, workers: int) -> Background:
    """pytest on ``selection`` in a process of its own, its output in build/test-logs/NAME.log and its tests'
    seconds in build/test-logs/durations-NAME.json (two pytest runs writing one file at once could lose one's)."""
    log, durations = LOGS / f"{name}.log", LOGS / f"durations-{name}.json"
    log.parent.mkdir(parents=True, exist_ok=True)
    durations.unlink(missing_ok=True)
    env = {**os.environ, "GPUFLEET_SHARED": shared, "GPUFLEET_DURATIONS": str(durations)}
    parallel = ["-n", str(workers), "--dist", "loadgroup"] if workers > 1 else []
    with log.open("wb") as out:
        process = subprocess.Popen(
            [py, "-m", "pytest", "-m", selection, *parallel, *shlex.split(args)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return Background(process, log, durations)


class Follower:
    """A tier started in the background the moment another background tier ends (a thread waits for it): the
    e2e tier may not share the machine with the calibrated module's twin, but it need not wait for the first
    tier's last, one-worker minutes either. Once stopped it never starts."""

    def __init__(self, first: Background, start: Callable[[], Background]) -> None:
        self._first, self._start = first, start
        self._lock = threading.Lock()
        self._stopped = False
        self._failed: BaseException | None = None
        self.tier: Background | None = None
        self._thread = threading.Thread(target=self._follow, name="follower", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        self._first.process.wait()
        self._first.ended = time.monotonic()
        with self._lock:
            if self._stopped:
                return
            try:
                self.tier = self._start()
            except BaseException as failed:  # raised again in the main thread by join()
                self._failed = failed

    def join(self) -> Background:
        self._thread.join()
        if self._failed is not None:
            raise self._failed
        assert self.tier is not None, "the follower was stopped before its tier started"
        return self.tier

    def stop(self) -> None:
        """Never start the tier, or stop it if it runs."""
        with self._lock:
            self._stopped = True
            tier = self.tier
        if tier is not None:
            tier.stop()


def _joined(clock: Clock, label: str, tier: Background) -> int:
    """Wait for a background tier, print its output, keep its wall time and its tests' seconds."""
    code = tier.join()
    print(tier.log.read_text(errors="replace"), end="", flush=True)
    clock.extra[label] = (tier.ended or time.monotonic()) - tier.started
    if tier.durations is not None:
        write_measured(recorded_durations(tier.durations), MEASURED)
    return code


def _pytest(c: Context, py: str, selection: str, args: str, shared: str, workers: int) -> int:
    parallel = f"-n {workers} --dist loadgroup " if workers > 1 else ""
    result = c.run(
        f'{py} -m pytest -m "{selection}" {parallel}{args}',
        pty=False,
        warn=True,
        env={"GPUFLEET_SHARED": shared, "GPUFLEET_DURATIONS": str(MEASURED)},
    )
    return 1 if result is None else int(result.exited)


def run(
    c: Context,
    pytest_args: str = "",
    build: Callable[[str], Build] = start_build,
    beside: Starter = start_background,
) -> None:
    """Every phase; raises invoke's Exit with the first failing phase's code."""
    py = sys.executable
    clock = Clock()
    clock.phase("reference data")
    # The pinned upstream reference data (traces, published curves, CRDs, chart values): ../shared or
    # GPUFLEET_SHARED offline, otherwise fetched, verified against benchmarks/reference-data.json and cached.
    found = c.run(f"{py} benchmarks/reference_data.py", hide="out", warn=True)
    if found is None or found.exited != 0:
        raise Exit(
            "the tests' reference data is missing and could not be fetched (see above): set GPUFLEET_SHARED to "
            "a folder that holds it, or fill the cache once from a mirror with "
            "`python benchmarks/reference_data.py --mirror URL` (README, Quickstart)",
            code=2,
        )
    shared = found.stdout.strip()
    MEASURED.unlink(missing_ok=True)  # each tier adds its tests' seconds (tests/conftest.py)
    clock.phase("twin toolchain (background)")
    before = set(descendants(os.getpid(), depth=1))
    building = build(py)
    print(f"twin toolchain: {building.note}", flush=True)
    calibrated: Background | None = None
    on_toolchain: Follower | None = None
    try:
        clock.phase("pytest calibrated (started)")
        if building.cached:
            calibrated = beside(py, "calibrated", CALIBRATED[1], pytest_args, shared, CALIBRATED[2])
            # names the first tier's do not rebind: the closure runs later, in the follower's thread
            _, e2e, e2e_workers = ON_TOOLCHAIN
            on_toolchain = Follower(
                calibrated, lambda: beside(py, "e2e", e2e, pytest_args, shared, e2e_workers)
            )
            print(
                f"pytest calibrated: running beside the next phases, output in {_shown(calibrated.log)}; the "
                f"tests on the toolchain start once it ends, output in {_shown(LOGS / 'e2e.log')}",
                flush=True,
            )
        else:
            print("pytest calibrated: after the toolchain is built", flush=True)
        clock.phase("ruff check")
        c.run(f"{py} -m ruff check .")
        clock.phase("ruff format")
        c.run(f"{py} -m ruff format --check .")
        clock.phase("mypy")
        c.run(f"{py} -m mypy infra scheduler twin")
        clock.phase("import contracts")
        c.run(f"{Path(py).parent / 'lint-imports'}")
        name, selection, workers = TIERS[0]
        clock.phase(name)
        codes = [_pytest(c, py, selection, pytest_args, shared, workers)]
        clock.phase("twin toolchain (joined)")
        built = building.join()
        clock.phase(CALIBRATED[0])
        if calibrated is not None:
            codes.append(_joined(clock, "pytest calibrated, its own run", calibrated))
        if built != 0:
            tail = (
                building.log.read_text(errors="replace").splitlines()[-20:] if building.log.is_file() else []
            )
            print("\n".join(["twin toolchain: the build failed:", *tail]), file=sys.stderr, flush=True)
            if os.environ.get("CI", "").lower() == "true":
                raise Exit("twin toolchain: the build failed (see above)", code=1)
        # the toolchain was built in this run: the calibrated module alone, before the tier that starts twins
        if calibrated is None:
            codes.append(_pytest(c, py, CALIBRATED[1], pytest_args, shared, CALIBRATED[2]))
        name, selection, workers = ON_TOOLCHAIN
        clock.phase(name)
        if on_toolchain is not None:
            codes.append(_joined(clock, "pytest on the toolchain, its own run", on_toolchain.join()))
        else:
            codes.append(_pytest(c, py, selection, pytest_args, shared, workers))
    except BaseException:
        if on_toolchain is not None:  # first, so that the calibrated module's end does not start it
            on_toolchain.stop()
        if calibrated is not None:
            calibrated.stop()
        if building.process is not None and building.process.poll() is None:
            building.process.terminate()
            building.process.wait()
        # the phase in the foreground: invoke's runner leaves its command running when a stop other than
        # Ctrl-C (SIGTERM, SIGHUP) is raised while it waits (invoke 3.0 Runner._finish forwards only
        # KeyboardInterrupt), so what this run started and has not stopped is stopped here
        stop_pids([pid for pid in descendants(os.getpid(), depth=1) if pid not in before])
        raise
    print(clock.summary(), flush=True)
    failed = [code for code in codes if code not in (0, NO_TESTS)]
    if failed or all(code == NO_TESTS for code in codes):
        raise Exit("some tests failed (see above)", code=failed[0] if failed else NO_TESTS)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
