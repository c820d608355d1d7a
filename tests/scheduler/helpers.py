"""Small lookups over compiled object lists."""

from __future__ import annotations

from typing import Any


def find(objects: list[dict[str, Any]], kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == kind and meta["name"] == name and meta.get("namespace") == namespace:
            return obj
    raise AssertionError(f"no {kind} {namespace}/{name} among {len(objects)} objects")


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def flavor_quota(cq: dict[str, Any], flavor: str) -> dict[str, dict[str, Any]]:
    """resource name -> its quota entry, for one flavor of a ClusterQueue/Cohort."""
    for group in cq["spec"]["resourceGroups"]:
        for entry in group["flavors"]:
            if entry["name"] == flavor:
                return {r["name"]: r for r in entry["resources"]}
    raise AssertionError(f"flavor {flavor} not in {cq['metadata']['name']}")
