"""What every spec rule writes its problems with: the key-path roots, close-match suggestions and duplicates.

The composer (`infra.rules`) and each domain's rules (`infra.aws.rules`, `infra.existing.rules`,
`infra.monitoring.rules`, `infra.aws.karpenter.rules`) import these; none of them imports the composer.
"""

from __future__ import annotations

import difflib
from collections import Counter

NP = "gpufleet:nodePools"
TEAMS = "gpufleet:teams"


def suggest(value: str, choices: list[str]) -> str:
    """A "; did you mean …?" hint naming up to three close matches, or "" when none is close."""
    close = difflib.get_close_matches(value, choices, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


def duplicates(values: list[str]) -> set[str]:
    return {v for v, n in Counter(values).items() if n > 1}


def check_sizes(at: str, lo: int | None, want: int | None, hi: int | None, problems: list[str]) -> None:
    """minSize <= desiredSize <= maxSize, and at least one node at most."""
    lo, hi = lo or 0, hi if hi is not None else 0
    want = lo if want is None else want
    if not lo <= want <= hi:
        problems.append(
            f"{at}: sizes must satisfy minSize <= desiredSize <= maxSize (got {lo} <= {want} <= {hi})"
        )
    if hi < 1:
        problems.append(f"{at}.maxSize: must be at least 1")
