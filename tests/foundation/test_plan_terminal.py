"""`invoke plan` in ordinary terminal widths: no value is ever cut (first-use review M1)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from infra.plan import build_plan
from infra.plan_report import _sections, print_plan
from tests.conftest import load_example

STACKS = ["dev", "example-prod", "example-karpenter", "metal", "metal-slurm"]


@pytest.mark.parametrize("width", [80, 100, 120, 200])
@pytest.mark.parametrize("stack", STACKS)
def test_m1_plan_never_cuts_a_value(stack: str, width: int) -> None:
    """First-use review M1: at 80 columns the quickstart's plan showed `g6e…`, `$2,…`; at 100 columns two
    pools of example-karpenter both became `a10g-s…`. Rich cuts a word that does not fit its column with an
    ellipsis (Rich docs, "Tables": column `overflow`, default "ellipsis"), so a table whose words cannot fit
    side by side is printed as one record per row. Every word of every cell is printed whole, at every width."""
    plan = build_plan(load_example(stack))
    out = io.StringIO()
    print_plan(plan, Console(file=out, width=width, color_system=None, legacy_windows=False))
    text = out.getvalue()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    words = set(text.split())
    for _, (head, rows) in _sections(plan):
        for cell in [*head, *(c for row in rows for c in row)]:
            missing = [w for w in cell.split() if w not in words]
            assert not missing, (stack, width, cell, missing)


def test_m1_wide_terminal_keeps_the_table() -> None:
    """Where the words fit, the table form stays (one row per pool, as before)."""
    plan = build_plan(load_example("dev"))
    out = io.StringIO()
    print_plan(plan, Console(file=out, width=200, color_system=None))
    assert "┏" in out.getvalue() and "pool l40s" not in out.getvalue()
