"""Filters that turn `nvidia-smi --query-gpu=... --format=csv` output into facts and compare them.

Kept free of Ansible imports (apart from the FilterModule hook) so the parsing and the comparison are
plain functions that unit tests call directly.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

# The query the role runs; the parser maps these names to fact keys.
QUERY_FIELDS = (
    "index",
    "name",
    "driver_version",
    "persistence_mode",
    "ecc.mode.current",
    "mig.mode.current",
    "memory.total",
    "pci.bus_id",
)
_KEYS = {
    "index": "index",
    "name": "name",
    "driver_version": "driver_version",
    "persistence_mode": "persistence_mode",
    "ecc.mode.current": "ecc_mode",
    "mig.mode.current": "mig_mode",
    "memory.total": "memory_total_mib",
    "pci.bus_id": "pci_bus_id",
}
_UNIT = re.compile(r"\s*\[[^\]]*\]$")  # "memory.total [MiB]" -> "memory.total"
_NOT_AVAILABLE = {"[N/A]", "N/A", "[Not Supported]", "Not Supported"}
# nvidia-smi prints other conditions in brackets too ("[Unknown Error]", "[Insufficient Permissions]",
# "[GPU is lost]", "[Requires Pending Reboot]"): kept as text so the comparison shows them as a difference.
_BRACKETED = re.compile(r"^\[[^\]]+\]$")


class NvidiaSmiParseError(ValueError):
    """The text is not the CSV that `nvidia-smi --format=csv` prints."""


def _mode(value: str) -> bool | str | None:
    """Enabled/Disabled -> True/False; N/A (e.g. MIG on an L40S, ECC on GeForce) -> None; another
    bracketed condition ("[Unknown Error]") -> that text, which no expectation equals."""
    if value in _NOT_AVAILABLE:
        return None
    if value in ("Enabled", "Disabled"):
        return value == "Enabled"
    if _BRACKETED.match(value):
        return value
    raise NvidiaSmiParseError(f"expected Enabled, Disabled or a bracketed condition, got {value!r}")


def _value(key: str, raw: str) -> Any:
    raw = raw.strip()
    if key in ("persistence_mode", "ecc_mode", "mig_mode"):
        return _mode(raw)
    if raw in _NOT_AVAILABLE:
        return None
    if _BRACKETED.match(raw):
        return raw  # a condition, not a value: compared as text, reported as a difference
    if key == "index":
        return int(raw)
    if key == "memory_total_mib":
        return int(raw.split()[0])
    return raw


def parse_nvidia_smi_csv(text: str) -> list[dict[str, Any]]:
    """Parse `nvidia-smi --query-gpu=<fields> --format=csv[,nounits]` (header line required)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    header = [_UNIT.sub("", column.strip()) for column in rows[0]]
    unknown = [column for column in header if column not in _KEYS]
    if unknown:
        raise NvidiaSmiParseError(f"unexpected nvidia-smi columns {unknown}; header was {lines[0]!r}")
    gpus = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise NvidiaSmiParseError(f"line {number} has {len(row)} fields, header has {len(header)}: {row}")
        gpus.append(
            {_KEYS[column]: _value(_KEYS[column], raw) for column, raw in zip(header, row, strict=True)}
        )
    return gpus


def _same(values: list[Any]) -> Any:
    """One value when every GPU agrees, else the sorted distinct values (a mixed host)."""
    distinct = sorted({value for value in values}, key=repr)
    return distinct[0] if len(distinct) == 1 else distinct


def nvidia_smi_summary(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """Host-level facts: GPU count and, per attribute, the common value (or the distinct values)."""
    return {
        "count": len(gpus),
        "models": sorted({gpu["name"] for gpu in gpus}),
        "driver_version": _same([gpu.get("driver_version") for gpu in gpus]) if gpus else None,
        "persistence_mode": _same([gpu.get("persistence_mode") for gpu in gpus]) if gpus else None,
        "ecc_mode": _same([gpu.get("ecc_mode") for gpu in gpus]) if gpus else None,
        "mig_mode": _same([gpu.get("mig_mode") for gpu in gpus]) if gpus else None,
    }


def gpu_verify_differences(summary: dict[str, Any], expected: dict[str, Any]) -> list[dict[str, str]]:
    """Rows of (check, expected, actual) for every expectation the host misses.

    `expected` keys: count (int), model (substring every GPU name must contain), driver_branch
    (driver major version), persistence_mode / ecc_mode / mig_mode (bool). Missing or None = not checked.
    """
    rows = []

    def miss(check: str, want: Any, got: Any) -> None:
        rows.append({"check": check, "expected": str(want), "actual": str(got)})

    if expected.get("count") is not None and summary["count"] != int(expected["count"]):
        miss("gpu count", expected["count"], summary["count"])
    model = expected.get("model")
    if model and (not summary["models"] or any(model not in name for name in summary["models"])):
        miss("gpu model", f"*{model}*", ", ".join(summary["models"]) or "no GPU")
    branch = expected.get("driver_branch")
    driver = summary["driver_version"]
    if branch and (not isinstance(driver, str) or driver.split(".")[0] != str(branch)):
        miss("driver branch", branch, driver)
    for key, label in (
        ("persistence_mode", "persistence mode"),
        ("ecc_mode", "ECC"),
        ("mig_mode", "MIG mode"),
    ):
        want = _as_bool(expected.get(key))
        if want is not None and summary[key] is not want:
            miss(label, _label(want), _label(summary[key]))
    return rows


def _as_bool(value: Any) -> bool | None:
    """Booleans as Ansible passes them (true/false, or strings from `-e key=value`); None = unset."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
        raise ValueError(f"expected a boolean, got {value!r}")
    return bool(value)


def _label(value: Any) -> str:
    if isinstance(value, list):
        return "mixed: " + ", ".join(_label(item) for item in value)
    if isinstance(value, str):
        return value  # a bracketed condition such as "[Unknown Error]"
    return {True: "Enabled", False: "Disabled", None: "N/A"}[value]


def gpu_verify_table(rows: list[dict[str, str]]) -> str:
    """Plain-text table of differences for a failure message."""
    header = {"check": "CHECK", "expected": "EXPECTED", "actual": "ACTUAL"}
    width = {key: max(len(row[key]) for row in [header, *rows]) for key in header}
    return "\n".join(
        "  ".join(row[key].ljust(width[key]) for key in header).rstrip() for row in [header, *rows]
    )


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_smi_csv": parse_nvidia_smi_csv,
            "nvidia_smi_summary": nvidia_smi_summary,
            "gpu_verify_differences": gpu_verify_differences,
            "gpu_verify_table": gpu_verify_table,
        }
