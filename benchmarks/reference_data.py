"""Reference data on any machine: the pinned upstream files the tests and benchmarks read.

``benchmarks/reference-data.json`` lists each file's place in the reference-data layout (``traces/...``,
``crds/...``), its public source at a pinned commit or tag, and its sha256. :func:`ensure` returns a folder
holding them all:

1. ``GPUFLEET_SHARED`` when set (offline, used as is);
2. ``../shared`` beside the clone when it has every file (offline);
3. otherwise a cache outside the clone (``$GPUFLEET_CACHE`` or ``$XDG_CACHE_HOME/gpufleet/reference``,
   default ``~/.cache/gpufleet/reference``), filled by downloading each missing file and **refusing** any file
   whose checksum differs (nothing is written for it).

Files the published artifact trimmed (the FGD results keep nine workloads) carry ``keep_rows``: the upstream CSV
is filtered to those rows, byte for byte, before the checksum. ``optional`` files are fetched when possible.
A mirror (``--mirror file:///srv/mirror`` or ``https://...``) replaces ``https://`` in every URL by its base, so
``https://raw.githubusercontent.com/o/r/c/p`` is read from ``<mirror>/raw.githubusercontent.com/o/r/c/p``.

``--only PREFIX`` asks for the files under one folder of the layout (``--only traces/alibaba-gpu-v2023``: the
openb trace the docs' simulate examples read) and fetches nothing else. A file that cannot be had says how to
work offline: ``GPUFLEET_SHARED`` pointing at a copy, or a mirror.

Usage: python benchmarks/reference_data.py [--only PREFIX] [--mirror URL] [--dest DIR]   (prints the folder)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCK = Path(__file__).with_name("reference-data.json")


class ReferenceDataError(RuntimeError):
    """A file that could not be fetched or whose checksum does not match the lock."""


def entries(lock: Path = LOCK) -> list[dict[str, Any]]:
    return list(json.loads(lock.read_text())["files"])


def default_cache() -> Path:
    if os.environ.get("GPUFLEET_CACHE"):
        return Path(os.environ["GPUFLEET_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpufleet" / "reference"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verified(root: Path, entry: dict[str, Any]) -> bool:
    path = root / entry["path"]
    return path.is_file() and _digest(path.read_bytes()) == entry["sha256"]


def complete(root: Path, files: Iterable[dict[str, Any]]) -> bool:
    """Every required file is there (presence only: a local copy is trusted, a download is not)."""
    return all((root / e["path"]).is_file() for e in files if not e.get("optional"))


def keep_rows(data: bytes, column: str, values: list[str]) -> bytes:
    """The header and the rows whose ``column`` is one of ``values``, lines kept byte for byte."""
    lines = data.split(b"\n")
    header = lines[0].split(b",")
    index = header.index(column.encode())
    wanted = {v.encode() for v in values}
    kept = [lines[0], *(line for line in lines[1:] if line and line.split(b",")[index] in wanted)]
    return b"\n".join(kept) + (b"\n" if data.endswith(b"\n") else b"")


def source_url(entry: dict[str, Any], mirror: str | None) -> str:
    url = str(entry["url"])
    if mirror:
        return mirror.rstrip("/") + "/" + url.split("://", 1)[1]
    return url


def fetch(
    dest: Path, *, mirror: str | None = None, lock: Path = LOCK, only: Iterable[str] | None = None
) -> list[str]:
    """Download every missing or stale file of the lock into ``dest``; returns the paths written.

    Raises :class:`ReferenceDataError` for a required file that cannot be read or does not match its
    checksum; a mismatching download is never written.
    """
    wanted = set(only) if only is not None else None
    written: list[str] = []
    for entry in entries(lock):
        if wanted is not None and entry["path"] not in wanted:
            continue
        if verified(dest, entry):
            continue
        url = source_url(entry, mirror)
        try:
            with urllib.request.urlopen(url, timeout=120) as response:  # pinned https, or a mirror
                data = response.read()
        except OSError as exc:
            if entry.get("optional"):
                continue
            raise ReferenceDataError(f"{entry['path']}: cannot download {url}: {exc}; {OFFLINE}") from None
        if "keep_rows" in entry:
            data = keep_rows(data, entry["keep_rows"]["column"], entry["keep_rows"]["values"])
        got = _digest(data)
        if got != entry["sha256"]:
            raise ReferenceDataError(
                f"{entry['path']}: refused: sha256 {got} from {url} does not match the pinned {entry['sha256']}"
            )
        target = dest / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, target)
        written.append(entry["path"])
    return written


OFFLINE = (
    "offline? set GPUFLEET_SHARED to a copy of the reference data, or pass --mirror URL (file:// or https://) "
    "of a mirror"
)


def selected(prefix: str | None, lock: Path = LOCK) -> list[dict[str, Any]]:
    """The lock's entries under `prefix` (all without one); none is an error naming the folders there are."""
    files = [e for e in entries(lock) if prefix is None or e["path"].startswith(prefix.rstrip("/") + "/")]
    if not files:
        folders = sorted({e["path"].rsplit("/", 1)[0] for e in entries(lock)})
        raise ReferenceDataError(f"--only {prefix}: no reference file there; folders: {', '.join(folders)}")
    return files


def locate(lock: Path = LOCK, prefix: str | None = None) -> Path | None:
    """An offline copy: GPUFLEET_SHARED (as is, once it is known to hold the files asked for), or ../shared
    beside the clone when it has them all."""
    files = selected(prefix, lock)
    if os.environ.get("GPUFLEET_SHARED"):
        shared = Path(os.environ["GPUFLEET_SHARED"])
        if prefix is not None and not complete(shared, files):
            missing = next(e["path"] for e in files if not (shared / e["path"]).is_file())
            raise ReferenceDataError(
                f"GPUFLEET_SHARED={shared} has no {missing}: point it at a copy of the reference data, or "
                "unset it to download the files"
            )
        return shared
    beside = ROOT.parent / "shared"
    return beside if complete(beside, files) else None


def ensure(
    *, mirror: str | None = None, dest: Path | None = None, lock: Path = LOCK, only: str | None = None
) -> Path:
    """A folder with every reference file (those under `only` when given): an offline copy, or the verified
    cache (fetched as needed)."""
    found = locate(lock, only) if dest is None and mirror is None else None
    if found is not None:
        return found
    target = dest or default_cache()
    fetch(target, mirror=mirror, lock=lock, only=[e["path"] for e in selected(only, lock)])
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mirror", help="read https://host/path from MIRROR/host/path (file:// or https://)")
    parser.add_argument("--dest", type=Path, help="cache folder (default: outside the clone)")
    parser.add_argument("--only", metavar="PREFIX", help="only the files under this folder, e.g. traces")
    args = parser.parse_args(argv)
    try:
        print(ensure(mirror=args.mirror, dest=args.dest, only=args.only))
    except ReferenceDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
