"""How long each test took: measured by every `invoke test` tier, kept for ordering the next runs' groups.

pytest-xdist hands a group out whole, in the order of its first test; the tiers order groups by their recorded
seconds (tests/conftest.py, `longest_first`), so the longest start first and none is left to run alone at the
end. A run writes what it measured to MEASURED, each tier adding its tests; copying that file over DURATIONS
refreshes the order. A stale record only costs order, never a result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"
MEASURED = ROOT / "build" / "test-logs" / "durations.json"
UNKNOWN_S = 1.0  # a test missing from the record


def recorded_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The seconds per test of the last full run on record; none when the file is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def write_measured(took: Mapping[str, float], path: Path) -> None:
    """`took` merged into what earlier tiers of the same run wrote to `path`."""
    if not took:
        return
    merged = {**recorded_durations(path), **{k: round(v, 2) for k, v in took.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
