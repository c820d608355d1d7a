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


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector evaluated as the API server does (apimachinery pkg/labels, "Label selectors" in the
    Kubernetes docs): every matchLabels pair must be present; `In` needs the key with one of the values,
    `NotIn` matches when the key is absent or its value is not listed, `Exists`/`DoesNotExist` test the key."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True
