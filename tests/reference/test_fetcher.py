"""The reference-data fetcher against a local file:// mirror laid out like the public hosts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.reference_data import (
    ReferenceDataError,
    default_cache,
    ensure,
    entries,
    fetch,
    source_url,
    verified,
)
from tests.conftest import ROOT

PICK = (
    "crds/kueue/kueue.x-k8s.io_resourceflavors.yaml",
    "traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv",
    "traces/fgd-expected/analysis_allo_discrete.csv",
    "kube-scheduler/upstream/extender-v1-types.go",  # optional: absent from the mirror
)


def mirror_of(shared: Path, tmp: Path, corrupt: str | None = None) -> tuple[str, Path]:
    """A mirror holding the picked files at their URLs' paths; the trimmed CSV in its upstream (untrimmed)
    form, with a row of a workload the lock drops."""
    base = tmp / "mirror"
    chosen = [e for e in entries() if e["path"] in PICK]
    for e in chosen:
        if e.get("optional"):
            continue
        target = base / e["url"].split("://", 1)[1]
        target.parent.mkdir(parents=True, exist_ok=True)
        data = (shared / e["path"]).read_bytes()
        if "keep_rows" in e:
            extra = b"openb_pod_list_gpuspec10," + data.split(b"\n")[1].split(b",", 1)[1]
            data = data + extra + b"\n"
        if e["path"] == corrupt:
            data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
        target.write_bytes(data)
    lock = tmp / "lock.json"
    lock.write_text(json.dumps({"files": chosen}))
    return base.as_uri(), lock


def test_fetch_verifies_filters_and_caches(shared_dir: Path, tmp_path: Path) -> None:
    mirror, lock = mirror_of(shared_dir, tmp_path)
    dest = tmp_path / "cache"
    written = fetch(dest, mirror=mirror, lock=lock)
    assert sorted(written) == sorted(p for p in PICK if not p.startswith("kube-scheduler"))
    for path in written:  # byte-identical to the pinned copies (the trimmed CSV after keep_rows)
        assert (dest / path).read_bytes() == (shared_dir / path).read_bytes()
    assert fetch(dest, mirror=mirror, lock=lock) == []  # verified cache: nothing fetched again
    assert not (dest / "kube-scheduler/upstream/extender-v1-types.go").exists()  # optional, unavailable


def test_a_corrupted_file_is_refused_and_never_written(shared_dir: Path, tmp_path: Path) -> None:
    bad = "crds/kueue/kueue.x-k8s.io_resourceflavors.yaml"
    mirror, lock = mirror_of(shared_dir, tmp_path, corrupt=bad)
    dest = tmp_path / "cache"
    with pytest.raises(ReferenceDataError, match=r"resourceflavors.yaml: refused: sha256 \w+ from file://"):
        fetch(dest, mirror=mirror, lock=lock)
    assert not (dest / bad).exists()
    assert not list(dest.rglob("tmp*"))  # no half-written file left behind


def test_a_stale_cached_file_is_replaced(shared_dir: Path, tmp_path: Path) -> None:
    mirror, lock = mirror_of(shared_dir, tmp_path)
    dest = tmp_path / "cache"
    stale = dest / PICK[1]
    stale.parent.mkdir(parents=True)
    stale.write_text("sn,cpu_milli\n")
    assert PICK[1] in fetch(dest, mirror=mirror, lock=lock)
    (entry,) = [e for e in entries() if e["path"] == PICK[1]]
    assert verified(dest, entry)


def test_missing_required_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (entry,) = [e for e in entries() if e["path"] == PICK[0]]
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({"files": [entry]}))
    with pytest.raises(ReferenceDataError, match=r"resourceflavors\.yaml: cannot download file://"):
        fetch(tmp_path / "cache", mirror=(tmp_path / "empty").as_uri(), lock=lock)


def test_offline_copies_win_and_the_cache_is_outside_the_clone(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFLEET_SHARED", str(tmp_path))
    assert ensure() == tmp_path
    monkeypatch.delenv("GPUFLEET_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache() == tmp_path / "xdg" / "gpufleet" / "reference"
    assert ROOT not in default_cache().parents


def test_every_pinned_url_names_a_commit_or_tag_on_a_public_host() -> None:
    for e in entries():
        url: Any = e["url"]
        assert url.startswith("https://raw.githubusercontent.com/"), url
        ref = url.split("/")[5]
        assert len(ref) == 40 or ref.startswith("v"), url  # a commit, or a release tag
        assert len(e["sha256"]) == 64
        assert source_url(e, "file:///m").startswith("file:///m/raw.githubusercontent.com/")


def test_the_lock_covers_the_reference_data_the_tests_read(shared_dir: Path) -> None:
    """Every CRD, chart value file, trace and published curve of the reference data is pinned, and the pins
    match the copies here."""
    pinned = {e["path"]: e for e in entries()}
    for folder in ("crds", "traces/alibaba-gpu-v2023", "traces/fgd-expected", "metrics/dcgm-exporter"):
        for path in (shared_dir / folder).rglob("*"):
            if path.is_file() and path.suffix in (".yaml", ".csv"):
                rel = str(path.relative_to(shared_dir))
                assert rel in pinned, rel
                assert verified(shared_dir, pinned[rel]), rel


def test_only_the_folder_asked_for_is_fetched(shared_dir: Path, tmp_path: Path) -> None:
    """`--only traces/...` (the docs' simulate examples) fetches the trace and no CRD: a CRD that cannot be
    downloaded does not stop it."""
    mirror, lock = mirror_of(shared_dir, tmp_path)
    crd = next(e for e in entries() if e["path"] == PICK[0])
    (tmp_path / "mirror" / crd["url"].split("://", 1)[1]).unlink()
    folder = ensure(mirror=mirror, dest=tmp_path / "cache", lock=lock, only="traces/alibaba-gpu-v2023")
    assert (folder / PICK[1]).is_file() and not (folder / PICK[0]).exists()
    with pytest.raises(ReferenceDataError, match=r"offline[?] set GPUFLEET_SHARED to a copy"):
        ensure(mirror=mirror, dest=tmp_path / "cache", lock=lock)


def test_a_shared_copy_without_the_files_names_the_variable(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFLEET_SHARED", str(tmp_path / "nowhere"))
    with pytest.raises(
        ReferenceDataError, match=r"GPUFLEET_SHARED=.*/nowhere has no traces/alibaba-gpu-v2023/"
    ):
        ensure(only="traces/alibaba-gpu-v2023")
