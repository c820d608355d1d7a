"""Render compiled objects for GitOps: one YAML file per object plus a kustomization.yaml listing them in order.

File names are `<rank>-<kind>-[<namespace>-]<name>.yaml`, where rank is the kind's apply rank, so a listing
sorts in apply order and adding a team adds files without renaming others. Rendering replaces the directory's
previous YAML files, so an object removed from the spec disappears from Git too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from scheduler.compiler import KIND_ORDER, apply_key
from scheduler.kueue import as_stored
from scheduler.yamltext import NoAliasDumper

KUSTOMIZATION = "kustomization.yaml"
KUEUE_VALUES = "kueue-values.yaml"
RENDERED = re.compile(r"^\d{2}-[a-z]+-.+\.yaml$")  # only files this module wrote are replaced


def file_name(obj: dict[str, Any]) -> str:
    rank, namespace, name = apply_key(obj)
    parts = [f"{rank:02d}", obj["kind"].lower(), *([namespace] if namespace else []), name]
    return "-".join(parts) + ".yaml"


class _Dumper(NoAliasDumper):
    """Multi-line strings (embedded config files) as readable `|` blocks instead of escaped one-liners; no
    anchors or aliases (a repeated object is written out again)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(obj: dict[str, Any]) -> str:
    """One object as YAML, in the form the API server stores it (quantities as strings)."""
    return yaml.dump(as_stored(obj), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def render(
    objects: Sequence[dict[str, Any]], out_dir: str | Path, *, kueue_values: dict[str, Any] | None = None
) -> list[Path]:
    """Write the objects (already in apply order) and the kustomization; return the written paths.

    `kueue_values`, when given, is written beside them as kueue-values.yaml for the Kueue chart release (it is
    not a Kubernetes object, so the kustomization does not list it).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [file_name(obj) for obj in objects]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"two objects render to the same file: {', '.join(dupes)}")
    for stale in out.glob("*.yaml"):
        if RENDERED.match(stale.name):
            stale.unlink()
    written = []
    for name, obj in zip(names, objects, strict=True):
        path = out / name
        path.write_text(dump(obj))
        written.append(path)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": names,
    }
    (out / KUSTOMIZATION).write_text(dump(kustomization))
    written.append(out / KUSTOMIZATION)
    if kueue_values is not None:
        (out / KUEUE_VALUES).write_text(dump(kueue_values))
        written.append(out / KUEUE_VALUES)
    return written


__all__ = ["KIND_ORDER", "render"]
