"""The e2e tier: tests that run on the twin, the stack's cluster on real Kubernetes components.

Each twin is a session fixture started the way `invoke twin` starts one (its own network namespace, the API
server forwarded to the machine's loopback) with its own lock file, so a developer's own `invoke twin` does not
collide with the tests. `invoke test` builds the toolchain first; a missing toolchain fails under CI=true and
skips elsewhere (with what to run).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.errors import CheckFailed, ToolMissing
from infra.stackfile import load_stack
from tests.conftest import ROOT
from tests.support import require
from tests.twin.kube import Kube
from twin import launch
from twin.launch import RunningTwin
from twin.toolchain.build import Toolchain, locate


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/twin/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


# The autoscaler stand-in's clock, a hundred times the wall's: a p5 boots in 9 s, an empty node goes 6 s after
# its group's unneeded time (10 min) would have run, and 12 s after a scale-up (20 min).
TIME_SCALE = "0.01"


def toolchain(minor: str) -> Toolchain:
    try:
        return locate(minor, lambda _line: None)
    except ToolMissing as exc:
        require(f"the twin's toolchain is missing: {exc}")  # exc says how to build it


def start_twin(
    tmp: pytest.TempPathFactory,
    stack: str | Path,
    *,
    bare: bool = False,
    minor: str = "",
    nodes: str = "desired",
    monitoring: bool = False,
    time_scale: str = TIME_SCALE,
    frameworks: bool = False,
) -> RunningTwin:
    """A twin of an example stack (by name) or of a stack file (a path). It serves the job frameworks' CRDs
    (PyTorchJob, RayJob, JobSet...) only where asked: the session twins, on which the tests of those kinds run,
    do; a module's own twin need not, as a cluster without those operators, and starts on half the API
    server's CPU (`invoke twin --no-frameworks`)."""
    path = stack if isinstance(stack, Path) else ROOT / f"Pulumi.{stack}.yaml"
    spec = load_stack(path)
    toolchain(minor or spec.cluster.kubernetes_version)
    folder = tmp.mktemp(f"twin-{spec.stack}")
    out = folder.parent / f"{folder.name}.out"
    log = out.open("wb")
    try:
        return launch.start(
            path, spec, folder / "twin", minor=minor, nodes=nodes, bare=bare, monitoring=monitoring,
            time_scale=time_scale, frameworks=frameworks, stdout=log, lock=folder.parent / f"{folder.name}.lock",
            say=lambda _line: None,
        )  # fmt: skip
    except CheckFailed as exc:
        # CI keeps only what pytest prints: the session's own words and the last component log it wrote
        raise CheckFailed(
            f"{exc}\n{last_lines(out)}\n{last_lines(*latest_log(folder / 'twin' / 'logs'))}"
        ) from None


def last_lines(*paths: Path, count: int = 30) -> str:
    """The end of a file, headed by its name, for a failure message."""
    return "\n".join(
        f"--- {path.name} (last {count} lines)\n"
        + "\n".join(path.read_text(errors="replace").splitlines()[-count:])
        for path in paths
    )


def latest_log(logs: Path) -> list[Path]:
    """The component log written last: the one a failed start most likely ended in."""
    found = sorted(logs.glob("*.log"), key=lambda p: p.stat().st_mtime) if logs.is_dir() else []
    return found[-1:]


@pytest.fixture(scope="session")
def metal_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """The metal stack (existing platform, Kubernetes 1.35) with its policy deployed."""
    twin = start_twin(tmp_path_factory, "metal", frameworks=True)
    yield Kube.of(twin)
    twin.stop()


@pytest.fixture(scope="session")
def prod_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """example-prod (aws: capacity-block EFA, time-sliced, MIG pools; 1.35) with its policy deployed, its pools at
    their desired sizes (mostly 0): jobs get their nodes through the ProvisioningRequest path, as on EKS."""
    twin = start_twin(tmp_path_factory, "example-prod", frameworks=True)
    yield Kube.of(twin)
    twin.stop()


def stack_variant(tmp: pytest.TempPathFactory, stack: str, name: str, **config: object) -> Path:
    """A copy of an example stack file with some `gpufleet:` sections replaced (`scheduling={...}`)."""
    import yaml

    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    for key, value in config.items():
        doc["config"][f"gpufleet:{key}"] = value
    path = tmp.mktemp("stacks") / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def twin_log(twin: RunningTwin, name: str) -> str:
    path = Path(twin.folder) / "logs" / f"{name}.log"
    return path.read_text(errors="replace") if path.is_file() else ""
