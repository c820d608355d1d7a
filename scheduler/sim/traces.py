"""Readers for openb-format trace files (the Alibaba GPU trace of the FGD paper) and a generic pod CSV.

- nodes: ``sn, cpu_milli, memory_mib, gpu, model`` (openb node list);
- pods: openb pod list (``name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]``) or the generic
  ``cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec]`` (pods are then named by row, keeping file order).

Every malformed value raises :class:`TraceError` naming the file and the row; extra columns are ignored.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.sim.errors import TraceError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"cannot read the file: {exc.strerror}", path=str(path)) from None
    with handle:
        reader = csv.DictReader(handle, skipinitialspace=True)
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(
                f"missing column(s) {', '.join(missing)}; expected at least {', '.join(required)} "
                f"(found: {', '.join(header) or 'no header'})",
                path=str(path),
            )
        yield from enumerate(reader, start=1)


def _count(row: dict[str, str], column: str, path: Path, number: int) -> int:
    raw = row.get(column)
    if raw is None:  # csv.DictReader fills the columns a short row lacks with None
        raise TraceError(
            f"column {column!r} is missing in this row (it has fewer fields than the header)",
            path=str(path),
            row=number,
        )
    text = raw.strip()
    try:
        value = int(text)
    except ValueError:
        try:
            as_float = float(text)
        except ValueError:
            raise TraceError(
                f"column {column!r} must be a non-negative integer, got {raw!r}", path=str(path), row=number
            ) from None
        if not as_float.is_integer():
            raise TraceError(
                f"column {column!r} must be a non-negative integer, got {raw!r}", path=str(path), row=number
            ) from None
        value = int(as_float)
    if value < 0:
        raise TraceError(f"column {column!r} must not be negative, got {value}", path=str(path), row=number)
    return value


def read_nodes(path: str | Path) -> Cluster:
    """Read an openb node list (``sn, cpu_milli, memory_mib, gpu, model``)."""
    path = Path(path)
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    gpus: list[int] = []
    models: list[str] = []
    seen: dict[str, int] = {}
    for number, row in _rows(path, NODE_COLUMNS):
        name = (row.get("sn") or "").strip()
        if not name:
            raise TraceError("column 'sn' (node name) is empty", path=str(path), row=number)
        if name in seen:
            raise TraceError(f"node {name!r} already defined in row {seen[name]}", path=str(path), row=number)
        seen[name] = number
        names.append(name)
        cpu.append(_count(row, "cpu_milli", path, number))
        mem.append(_count(row, "memory_mib", path, number))
        gpus.append(_count(row, "gpu", path, number))
        models.append((row.get("model") or "").strip())
    if not names:
        raise TraceError("no nodes in the file", path=str(path))
    return Cluster.build(names, cpu, mem, gpus, models)


def read_pods(path: str | Path) -> Workload:
    """Read an openb pod list or a generic pod CSV (see the module docstring)."""
    path = Path(path)
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    num_gpu: list[int] = []
    gpu_milli: list[int] = []
    spec: list[str] = []
    for number, row in _rows(path, POD_COLUMNS):
        c = _count(row, "cpu_milli", path, number)
        m = _count(row, "memory_mib", path, number)
        k = _count(row, "num_gpu", path, number)
        d = _count(row, "gpu_milli", path, number)
        if d > MILLI:
            raise TraceError(
                f"gpu_milli is the request per GPU and must be 0..{MILLI}, got {d}",
                path=str(path),
                row=number,
            )
        if 0 < d < MILLI and k != 1:
            raise TraceError(
                f"a GPU-sharing pod (gpu_milli {d} < {MILLI}) must have num_gpu 1, got {k}",
                path=str(path),
                row=number,
            )
        if (k == 0) != (d == 0):
            raise TraceError(
                f"num_gpu ({k}) and gpu_milli ({d}) must both be 0 (CPU-only pod) or both be positive",
                path=str(path),
                row=number,
            )
        name = (row.get("name") or "").strip() or f"row-{number:06d}"
        models = [s.strip() for s in (row.get("gpu_spec") or "").split("|") if s.strip()]
        names.append(name)
        cpu.append(c)
        mem.append(m)
        num_gpu.append(k)
        gpu_milli.append(d)
        spec.append("|".join(models) if k > 0 else "")
    if not names:
        raise TraceError("no pods in the file", path=str(path))
    return Workload.build(cpu, mem, num_gpu, gpu_milli, spec, names=names, source=str(path))
