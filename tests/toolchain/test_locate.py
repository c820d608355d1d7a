"""Finding the twin's toolchain: only what a run needs is required, and a binary the toolchain did not build
itself (GPUFLEET_TWIN_BIN or PATH) is used only when it is the pinned release: a different one would run under
the pin's name. A version is what the program says (`--version` and the like) or, for programs without such a
flag, the module versions Go embeds in every binary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.errors import ToolMissing
from infra.versions import TWIN_ETCD, TWIN_KUEUE, TWIN_MINORS
from tests.conftest import ROOT
from tests.support import require
from twin.toolchain import build
from twin.toolchain.build import components, go_build_info, locate, version_problem

MINOR = TWIN_MINORS[0]


def script(folder: Path, name: str, says: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(0o755)
    return path


def go_binary(folder: Path, name: str, modinfo: str) -> Path:
    """A file with the build-info block Go writes into a binary (src/debug/buildinfo/buildinfo.go: the magic,
    pointer size, flags with bit 2 for inline strings, padding to 32 bytes, then the Go version and the module
    info as varint-length-prefixed strings)."""

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    header = b"\xff Go buildinf:" + bytes([8, 2])
    body = header.ljust(32, b"\0")
    for text in ("go1.26.8", "0w\xaf\x0c\x92t\x08\x02A\xe1\xc1\x07\xe6\xd6\x18\xe6" + modinfo):
        raw = text.encode("latin-1") if text.startswith("0w") else text.encode()
        body += varint(len(raw)) + raw
    path = folder / name
    path.write_bytes(b"\x7fELF" + b"\0" * 64 + body + b"\0" * 64)
    path.chmod(0o755)
    return path


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache and a binaries folder of the test's own; PATH holds nothing of the toolchain."""
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(build.BIN_ENV, str(tmp_path / "bin"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    (tmp_path / "bin").mkdir()
    return tmp_path / "bin"


def test_a_binary_of_another_release_is_refused_with_its_name(isolated: Path) -> None:
    fake = script(isolated, "etcd", "etcd Version: 3.5.21")
    with pytest.raises(ToolMissing) as refused:
        locate(MINOR, lambda _line: None)
    said = str(refused.value)
    assert f"the twin needs etcd (etcd {TWIN_ETCD.version})" in said
    assert f"found instead: {fake} is not etcd {TWIN_ETCD.version}" in said and "3.5.21" in said


def test_a_binary_of_the_pinned_release_is_used(isolated: Path) -> None:
    script(isolated, "etcd", f"etcd Version: {TWIN_ETCD.version.removeprefix('v')}\nGit SHA: abc")
    assert version_problem(TWIN_ETCD, "etcd", isolated / "etcd") is None


def test_a_program_without_a_version_flag_is_judged_by_its_go_build_info(tmp_path: Path) -> None:
    right = go_binary(
        tmp_path,
        "kueue",
        f"path\tsigs.k8s.io/kueue/cmd/kueue\nmod\tsigs.k8s.io/kueue\t{TWIN_KUEUE.version}\th1:x=\n",
    )
    assert f"mod\tsigs.k8s.io/kueue\t{TWIN_KUEUE.version}" in go_build_info(right)
    assert version_problem(TWIN_KUEUE, "kueue", right) is None
    (tmp_path / "old").mkdir()
    wrong = go_binary(
        tmp_path / "old",
        "kueue",
        "path\tsigs.k8s.io/kueue/cmd/kueue\nmod\tsigs.k8s.io/kueue\tv0.18.0\th1:x=\n",
    )
    assert "module sigs.k8s.io/kueue v0.18.0" in str(version_problem(TWIN_KUEUE, "kueue", wrong))


def test_invoke_twin_refuses_it_in_one_line_and_starts_nothing(isolated: Path, tmp_path: Path) -> None:
    script(isolated, "etcd", "etcd Version: 3.5.21")
    env = {**os.environ, "GPUFLEET_TWIN_LOCK": str(tmp_path / "lock")}
    stack = tmp_path / "Pulumi.locate-test.yaml"
    stack.write_text((ROOT / "Pulumi.metal.yaml").read_text())
    done = subprocess.run([sys.executable, "-m", "invoke", "twin", "--stack", str(stack), "--bare"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        len(done.stderr.strip().splitlines()) == 1
        and "3.5.21" in done.stderr
        and "Traceback" not in done.stderr
    )
    assert not (ROOT / "build" / "locate-test").exists()


@pytest.mark.toolchain
def test_only_what_the_run_needs_is_required(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A twin without `--monitoring` runs without the monitoring chain's programs built (the operator's CRDs, data
    every twin serves, stay); with it, they are named as missing. Karpenter likewise only on a Karpenter stack."""
    built = build.cache_root()
    require(
        all(build.is_built(c) for c in components([MINOR])), f"the twin's toolchain must be built ({built})"
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    for c in components([MINOR]):
        if c.name in build.KARPENTER:
            continue
        if c.name not in build.MONITORING:
            (cache / build.folder(c).name).symlink_to(build.folder(c))
        elif (build.folder(c) / "data").is_dir():  # the operator's CRDs every twin serves, not its program
            (cache / build.folder(c).name).mkdir()
            (cache / build.folder(c).name / "data").symlink_to(build.folder(c) / "data")
    monkeypatch.setenv(build.CACHE_ENV, str(cache))
    monkeypatch.delenv(build.BIN_ENV, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    tools = locate(MINOR, lambda _line: None)
    assert "kube-apiserver" in tools.programs and "prometheus" not in tools.programs
    with pytest.raises(ToolMissing) as missing:
        locate(MINOR, lambda _line: None, monitoring=True)
    assert "prometheus" in str(missing.value) and "kube-state-metrics" in str(missing.value)
    assert "kube-apiserver" not in str(missing.value)
    assert "karpenter-kwok" not in tools.programs
    with pytest.raises(ToolMissing, match="karpenter-kwok"):
        locate(MINOR, lambda _line: None, karpenter=True)


def test_the_missing_toolchain_message_quotes_the_measured_cold_build() -> None:
    """The message a user meets before `invoke twin-build` says how long the build takes as measured on 2 cores
    (benchmarks/twin_toolchain.md), not a guess a third of it."""
    from tests.conftest import ROOT
    from twin.toolchain.build import BUILD_HINT

    assert "about 40-55 minutes cold on 2 cores" in BUILD_HINT
    assert '"about 40-55 minutes"' in (ROOT / "benchmarks/twin_toolchain.md").read_text()
