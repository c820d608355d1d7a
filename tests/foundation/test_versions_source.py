"""Every version from one source: `infra.versions` names each pin once; the twin's Go wrapper modules and the
reference data the tests read are checked against it, so neither side can move alone.

A wrapper's `go.mod` decides what `go install … tool` builds (a `tool` directive's package is built at the version
the module's requirements select: https://go.dev/doc/modules/gomod-ref#tool), while the cache and the binary's
version stamp take the pin's name: a pin bumped without its wrapper would run the old component under the new
name.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra import versions as v
from infra.versions import GoBuild
from tests.conftest import ROOT
from tests.support import require
from twin.toolchain.build import WRAPPERS, go_env

REFERENCE = json.loads((ROOT / "benchmarks" / "reference-data.json").read_text())["files"]
PINS = Path(v.__file__)


def twin_builds() -> list[GoBuild]:
    """Every component the twin builds or reads: the TWIN_* pins and the control plane of each built minor."""
    pinned = [
        value for name, value in vars(v).items() if name.startswith("TWIN_") and isinstance(value, GoBuild)
    ]
    return pinned + [v.twin_kubernetes(minor) for minor in v.TWIN_MINORS]


def required(go_mod: Path) -> dict[str, str]:
    """module -> version of every `require` line of a go.mod (block or single-line form)."""
    text = go_mod.read_text()
    lines = re.findall(r"^\s*require\s+(\S+)\s+(\S+)", text, re.M)
    for block in re.findall(r"^require\s*\((.*?)^\)", text, re.M | re.S):
        lines += re.findall(r"^\s*(\S+)\s+(v\S+)", block, re.M)
    return dict(lines)


@pytest.mark.parametrize("build", [b for b in twin_builds() if b.wrapper], ids=lambda b: b.wrapper)
def test_each_wrapper_requires_the_pinned_version(build: GoBuild) -> None:
    go_mod = WRAPPERS / build.wrapper / "go.mod"
    assert go_mod.is_file(), f"{build.name}: no wrapper module at {go_mod.relative_to(ROOT)}"
    got = required(go_mod).get(build.module)
    assert got == build.version, (
        f"{go_mod.relative_to(ROOT)} requires {build.module} {got}, infra.versions pins {build.version}: "
        "bump both (go get in the wrapper, then go mod tidy)"
    )


def test_every_wrapper_folder_belongs_to_a_pin() -> None:
    """A wrapper no pin names is built by nobody and drifts unseen."""
    folders = {p.parent.name for p in WRAPPERS.glob("*/go.mod")}
    assert folders == {b.wrapper for b in twin_builds() if b.wrapper}


def test_kueue_is_named_once() -> None:
    """The chart, the controller the twin builds and the scheduler's policy all read `KUEUE_VERSION`; the
    literal appears nowhere else in the product."""
    assert v.Versions().kueue_chart == v.KUEUE_VERSION and v.TWIN_KUEUE.version == f"v{v.KUEUE_VERSION}"
    literal = re.compile(rf"""["']v?{re.escape(v.KUEUE_VERSION)}["']""")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("infra", "scheduler", "twin")
        for path in (ROOT / folder).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line.split("#")[0]) and path != PINS
    ]
    assert found == []


def _repo(url: str) -> str:
    parts = url.split("/")
    return f"{parts[3]}/{parts[4]}"


def _pinned_release(repo: str) -> str | None:
    """The release of `repo` the stacks deploy, from the versions source; None for data that is not a pin."""
    pins = v.Versions()
    return {
        "kubernetes-sigs/kueue": f"v{v.KUEUE_VERSION}",
        "NVIDIA/gpu-operator": pins.gpu_operator_chart,
        "aws/karpenter-provider-aws": f"v{pins.karpenter_chart}",
        "kubernetes-sigs/karpenter": f"v{pins.karpenter_chart}",  # the core the AWS provider's release uses
        "prometheus-community/helm-charts": f"kube-prometheus-stack-{pins.kube_prometheus_stack_chart}",
        "prometheus-operator/prometheus-operator": v.TWIN_PROMETHEUS_OPERATOR.version,
        "kubernetes/kubernetes": v.PER_MINOR["1.36"].kubernetes_patch,
    }.get(repo)


# (dcgm-exporter's counter files are data of the exporter releases the platforms deploy, not a pin of their own.)
# Reference files kept at another release than the pin, each checked to be the same data: the CRDs of
# prometheus-operator v0.93.0 and v0.93.1 differ only in their `operator.prometheus.io/version` annotation, and
# kube-scheduler's extender and config v1 types are identical in v1.36.3 and v1.36.4 (diff of the Go module
# zips github.com/prometheus-operator/prometheus-operator and k8s.io/kube-scheduler at both versions).
SAME_DATA = {("prometheus-operator/prometheus-operator", "v0.93.0"), ("kubernetes/kubernetes", "v1.36.3")}


@pytest.mark.parametrize(
    "entry", [f for f in REFERENCE if _pinned_release(_repo(f["url"]))], ids=lambda f: f["path"]
)
def test_reference_data_is_at_the_pinned_release(entry: dict[str, Any]) -> None:
    repo = _repo(entry["url"])
    if (repo, entry["release"]) in SAME_DATA:
        return
    assert entry["release"] == _pinned_release(repo), (
        f"benchmarks/reference-data.json {entry['path']}: release {entry['release']}, but the stacks deploy "
        f"{_pinned_release(repo)} (infra/versions.py)"
    )


def test_kueue_reference_urls_name_the_tags_commit() -> None:
    """The Kueue reference files are fetched by commit; the Go module proxy records which commit the pinned tag
    names (the module's `.info` Origin): the two must agree."""
    require(shutil.which("go") is not None, "needs Go and the Go module proxy (or its cache)")
    build = v.TWIN_KUEUE
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{build.module}@{build.version}"],
        capture_output=True, text=True, env=go_env(), cwd=WRAPPERS, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    origin = json.loads(done.stdout)["Origin"]
    assert origin["Ref"] == f"refs/tags/{build.version}"
    commits = {f["url"].split("/")[5] for f in REFERENCE if _repo(f["url"]) == "kubernetes-sigs/kueue"}
    assert commits == {origin["Hash"]}
