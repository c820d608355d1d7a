"""Filters that turn `nvidia-smi --query-gpu=... --format=csv` output into facts and compare them, and that
read the Fabric section of `nvidia-smi -q` on NVSwitch hosts.

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


# `nvidia-smi -q` prints, per GPU ("GPU 00000000:18:00.0" at column 0), a "Fabric" section whose State is the
# GPU's fabric registration state (nvmlGpuFabricInfo_t.state: Not Supported -> "N/A", Not Started,
# In Progress, Completed) and whose Status is the registration's result, meaningful only once the state is
# Completed (NVML API reference, nvmlGpuFabricInfo_t / "Fabric definitions"). NVIDIA's Fabric Manager user
# guide checks a registered GPU with `nvidia-smi -q -i 0 | grep -i -A 2 Fabric`: State Completed, Status Success.
_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_FIELD = re.compile(r"^(\s*)([^:]+?)\s*:\s*(.*?)\s*$")
FABRIC_OK = ("Completed", "Success")


def parse_nvidia_smi_fabric(text: str) -> list[dict[str, str | None]]:
    """Per GPU of `nvidia-smi -q`: {pci_bus_id, state, status}; state/status None when the GPU block has no
    Fabric section (drivers before the fabric query, R525 and older)."""
    gpus: list[dict[str, str | None]] = []
    indent: int | None = None  # indentation of the current Fabric section's header, None outside it
    for line in text.splitlines():
        header = _GPU_HEADER.match(line)
        if header:
            gpus.append({"pci_bus_id": header.group(1), "state": None, "status": None})
            indent = None
            continue
        if not gpus or not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if line.strip() == "Fabric":
            indent = depth
            continue
        if indent is None:
            continue
        if depth <= indent:  # the next section of the GPU block
            indent = None
            continue
        field = _FIELD.match(line)
        # Only the section's own fields (its "Health" subsection has deeper ones).
        if field and field.group(2) in ("State", "Status") and gpus[-1][field.group(2).lower()] is None:
            gpus[-1][field.group(2).lower()] = field.group(3)
    return gpus


def gpu_fabric_differences(
    smi_query: str | None, fabricmanager_state: str | None = None
) -> list[dict[str, str]]:
    """Rows of (check, expected, actual) for an NVSwitch host whose fabric is not up.

    smi_query: `nvidia-smi -q` output (None = not queried, e.g. skipped by tag). Every GPU must report
    State Completed and Status Success; GPUs that cannot report it (State "N/A": fabric registration is
    reported from Hopper on, NVML "not supported") are left to the Fabric Manager check.
    fabricmanager_state: `systemctl is-active nvidia-fabricmanager` (None = not queried); must be "active".
    """
    rows = []
    if fabricmanager_state is not None and fabricmanager_state.strip() != "active":
        rows.append(
            {
                "check": "fabric manager",
                "expected": "active",
                "actual": fabricmanager_state.strip() or "unknown",
            }
        )
    if smi_query is None:
        return rows
    gpus = parse_nvidia_smi_fabric(smi_query)
    if not gpus:
        rows.append(
            {
                "check": "gpu fabric",
                "expected": "State Completed, Status Success",
                "actual": "no GPU in nvidia-smi -q",
            }
        )
        return rows
    bad: dict[str, list[str]] = {}
    for gpu in gpus:
        state, status = gpu["state"], gpu["status"]
        if state in _NOT_AVAILABLE:
            continue
        if (state, status) != FABRIC_OK:
            actual = "no Fabric section" if state is None else f"State {state}, Status {status}"
            bad.setdefault(actual, []).append(str(gpu["pci_bus_id"]))
    for actual, buses in bad.items():
        rows.append(
            {
                "check": "gpu fabric",
                "expected": "State Completed, Status Success",
                "actual": f"{actual} ({len(buses)} GPU: {', '.join(buses)})",
            }
        )
    return rows


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_smi_csv": parse_nvidia_smi_csv,
            "nvidia_smi_summary": nvidia_smi_summary,
            "gpu_verify_differences": gpu_verify_differences,
            "gpu_verify_table": gpu_verify_table,
            "nvidia_smi_fabric": parse_nvidia_smi_fabric,
            "gpu_fabric_differences": gpu_fabric_differences,
        }
