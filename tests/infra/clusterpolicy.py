"""Render GPU operator helm values into the ClusterPolicy spec the chart's template would produce.

The chart (templates/clusterpolicy.yaml) copies, for each operand, its image fields and the settings below when
they are set; this mirrors it for every key our values builder sets, so validating the result against the
upstream CRD schema checks our values the way the API server will check the rendered object.
"""

from __future__ import annotations

import copy
from typing import Any

COMMON = (
    "enabled",
    "repository",
    "image",
    "version",
    "imagePullPolicy",
    "imagePullSecrets",
    "resources",
    "env",
    "args",
)
OPERANDS = (
    "driver",
    "toolkit",
    "devicePlugin",
    "dcgm",
    "dcgmExporter",
    "gfd",
    "migManager",
    "nodeStatusExporter",
)
EXTRA = {
    "driver": ("usePrecompiled", "kernelModuleType", "upgradePolicy", "startupProbe"),
    "toolkit": ("installDir",),
    "dcgmExporter": ("serviceMonitor", "enablePodLabels", "enablePodUID", "service", "hostPID"),
}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values over the chart's: maps merge, everything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _config(section: dict[str, Any]) -> dict[str, Any]:
    cfg = section.get("config") or {}
    return {k: cfg[k] for k in ("name", "default") if k in cfg}


def cluster_policy(values: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "operator": {"runtimeClass": values["operator"]["runtimeClass"]},
        "daemonsets": {
            k: values["daemonsets"][k]
            for k in (
                "tolerations",
                "priorityClassName",
                "updateStrategy",
                "rollingUpdate",
                "labels",
                "annotations",
            )
            if values["daemonsets"].get(k) not in (None, {}, [])
        },
        "mig": {"strategy": values["mig"]["strategy"]},
    }
    for name in OPERANDS:
        section = values[name]
        out = {
            k: section[k] for k in (*COMMON, *EXTRA.get(name, ())) if section.get(k) not in (None, "", [], {})
        }
        if "enabled" in section:
            out["enabled"] = section["enabled"]
        if name in ("devicePlugin", "migManager", "dcgmExporter") and _config(section):
            out["config"] = _config(section)
        spec[name] = out
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": spec,
    }


# Keys values.yaml documents only as a commented-out example (checked against its text in the tests).
COMMENTED_KEYS = frozenset({"dcgmExporter.config"})


def missing_keys(values: Any, chart: Any, path: str = "") -> list[str]:
    """Keys set in `values` that the chart's values.yaml does not have (free-form maps and lists excepted)."""
    if not isinstance(values, dict) or not isinstance(chart, dict) or chart == {}:
        return []
    missing = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if where in COMMENTED_KEYS:
            continue
        if key not in chart:
            missing.append(where)
        else:
            missing += missing_keys(value, chart[key], where)
    return missing
