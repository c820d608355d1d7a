"""Shared fixtures: the repository root, the reference data beside it, and the example stacks."""

from __future__ import annotations

import os
import signal
from collections import defaultdict
from pathlib import Path

import pytest

from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from tests.durations import UNKNOWN_S, recorded_durations, write_measured
from tests.support import require

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_STACKS = ("dev", "example-prod", "metal", "example-karpenter")


def shared_path() -> Path:
    return Path(os.environ.get("GPUFLEET_SHARED", ROOT.parent / "shared"))


# Fixtures that hand a test a program of the twin's toolchain (tests/monitoring/conftest.py).
TOOLCHAIN_FIXTURES = {"promtool", "prometheus_bin", "alertmanager_bin"}


# Session fixtures that hold a running twin: every test that uses one runs on one worker of a tier, so the twin
# starts once per tier rather than once on each worker (tests/twin/conftest.py).
SESSION_TWINS = ("metal_twin", "prod_twin")


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as a user's foreground command gets it, however the test run itself was started. A shell without
    job control starts a background command with SIGINT ignored, an ignored signal stays ignored across exec,
    and Python then installs no KeyboardInterrupt handler: every command the tests start (and the xdist workers)
    would ignore the SIGINT the interrupt tests send. A handler, unlike an ignored disposition, is reset to the
    default in each child."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the `xdist_group` marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that runs a program of the toolchain is a `toolchain` test (it waits for the build in `invoke test`);
    each test gets the worker group its shared fixtures call for, and the groups come first, the largest first."""
    groups: dict[str, str] = {}
    for item in items:
        if TOOLCHAIN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.toolchain)
        group = worker_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        groups[item.nodeid] = "_".join(sorted(
            str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")
        ))  # fmt: skip
    items[:] = longest_first(items, groups, recorded_durations())


def longest_first(
    items: list[pytest.Item], groups: dict[str, str], seconds: dict[str, float] | None = None
) -> list[pytest.Item]:
    """The tests in the order the workers should take them: pytest-xdist hands out a group whole, in the order
    of its first test, so a long group that comes last runs alone on one worker while the other idles. Groups
    go first, the longest first (by the recorded seconds of its tests; without a record, by how many tests it
    has), then the single tests that fill the gaps, the longest first; within a group the tests keep their
    order (some build on the one before)."""
    seconds = seconds or {}

    def cost(item: pytest.Item) -> float:
        return seconds.get(item.nodeid, UNKNOWN_S)

    sizes: dict[str, float] = defaultdict(float)
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        group = groups.get(item.nodeid, "")
        sizes[group] += cost(item)
        first.setdefault(group, index)

    def key(pair: tuple[int, pytest.Item]) -> tuple[int, float, int, int]:
        index, item = pair
        group = groups.get(item.nodeid, "")
        if not group:
            return (1, -cost(item), index, index)
        return (0, -sizes[group], first[group], index)

    return [item for _, item in sorted(enumerate(items), key=key)]


def worker_group(item: pytest.Item) -> str:
    """The `xdist_group` a test joins so that what it shares is set up once: under `--dist loadgroup` a test
    without a group is sent to any worker, so a module's tests split across both workers and each worker starts
    the module's twin (or Slurm daemons, or Debian root) for itself. A test with a group of its own keeps it; one
    on a session twin joins that twin's group; one with a module-scoped fixture joins its module's group."""
    if any(True for _ in item.iter_markers("xdist_group")):
        return ""
    names = tuple(getattr(item, "fixturenames", ()))
    twins = [twin for twin in SESSION_TWINS if twin in names]
    if len(twins) > 1:  # it would start the second twin on the first one's worker as well
        raise pytest.UsageError(f"{item.nodeid} uses {' and '.join(twins)}: one session twin per test")
    if twins:
        return twins[0]
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs if info is not None else {}
    if any(defs and defs[-1].scope == "module" for name in names if (defs := definitions.get(name))):
        return item.nodeid.split("::", 1)[0]
    return ""


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The reference data (CRDs, traces). Missing data fails in CI and skips elsewhere."""
    path = shared_path()
    found = (path / "crds").is_dir() and (path / "traces").is_dir()
    require(found, f"reference data not found at {path} (set GPUFLEET_SHARED)")
    return path


@pytest.fixture(scope="session", params=EXAMPLE_STACKS)
def example_spec(request: pytest.FixtureRequest) -> ClusterSpec:
    return load_stack(ROOT / f"Pulumi.{request.param}.yaml")


def load_example(name: str) -> ClusterSpec:
    return load_stack(ROOT / f"Pulumi.{name}.yaml")


_took: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's setup, call and teardown seconds (under pytest-xdist the controller gets every worker's)."""
    _took[report.nodeid] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The modules that took longest (a module's twin start-up counts in its first test's setup), so a slow
    tier's cause is in its log."""
    by_module: dict[str, float] = defaultdict(float)
    for nodeid, took in _took.items():
        by_module[nodeid.split("::", 1)[0]] += took
    slowest = sorted(by_module.items(), key=lambda kv: -kv[1])[:12]
    if slowest:
        terminalreporter.write_sep("-", "slowest modules (seconds, setup + call + teardown)")
        for module, took in slowest:
            terminalreporter.write_line(f"{took:8.1f}  {module}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """What this run measured goes into the file GPUFLEET_DURATIONS names (`invoke test` names MEASURED)."""
    target = os.environ.get("GPUFLEET_DURATIONS", "")
    if target and not hasattr(session.config, "workerinput"):
        write_measured(_took, Path(target))
