"""The kube-scheduler API types the extender tests read: the reference data's YAML extract when present,
otherwise the pinned upstream Go file (``kube-scheduler/upstream/*.go``, fetched and checksummed by
``benchmarks/reference_data.py``), parsed for struct fields, json names and int constants."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

STRUCT = re.compile(r"^type (\w+) struct \{\n(.*?)^\}", re.S | re.M)
FIELD = re.compile(r"^\t(\w+)\s+([^\s`]+)(?:\s+`json:\"([^\",]*)[^`]*`)?", re.M)
CONST = re.compile(r"^\t(\w+)\s+int64\s*=\s*(-?\d+)", re.M)


def parse_go(source: str) -> dict[str, Any]:
    """Structs (fields with their wire names: the json tag, or the Go name when untagged) and int64 constants."""
    types = []
    for name, body in STRUCT.findall(source):
        fields = [
            {"go": go, "type": typ, "json": tag if tag else go}
            for go, typ, tag in FIELD.findall(body)
            if not go.startswith("//")
        ]
        types.append({"name": name, "fields": fields})
    constants = [{"name": n, "value": v} for n, v in CONST.findall(source)]
    return {"types": types, "constants": constants}


def load_types(shared: Path, extract: str, upstream: str) -> dict[str, Any]:
    path = shared / "kube-scheduler" / extract
    if path.is_file():
        return dict(yaml.safe_load(path.read_text()))
    return parse_go((shared / "kube-scheduler" / "upstream" / upstream).read_text())
