"""`invoke plan` in ordinary terminal widths: no value is ever cut."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from infra.plan import build_plan
from infra.plan_report import _sections, print_plan
from infra.stackfile import load_stack
from tests.conftest import ROOT, load_example

STACKS = ["dev", "example-prod", "example-karpenter", "metal", "metal-slurm"]


@pytest.mark.parametrize("width", [80, 100, 120, 200])
@pytest.mark.parametrize("stack", STACKS)
def test_plan_never_cuts_a_value(stack: str, width: int) -> None:
    """Left to Rich, at 80 columns the quickstart's plan would show `g6e…`, `$2,…`, and at 100 columns two
    pools of example-karpenter both `a10g-s…`: Rich cuts a word that does not fit its column with an
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


def test_wide_terminal_keeps_the_table() -> None:
    """Where the words fit, the table form stays (one row per pool)."""
    plan = build_plan(load_example("dev"))
    out = io.StringIO()
    print_plan(plan, Console(file=out, width=200, color_system=None))
    assert "┏" in out.getvalue() and "pool l40s" not in out.getvalue()


def test_cost_note_names_the_price_region() -> None:
    """The catalog's prices are us-east-1's, and the cost note of the us-west-2 dev stack's plan says so,
    rather than naming us-east-1 as if it were the stack's region."""
    (note,) = [n for n in build_plan(load_example("dev")).notes if n.startswith("Costs:")]
    assert "us-east-1's, not us-west-2's" in note
    (note,) = [n for n in build_plan(load_example("example-prod")).notes if n.startswith("Costs:")]
    assert "(us-east-1; Linux)" in note


def test_a_stack_without_teams_is_told_nothing_can_run(tmp_path: Path) -> None:
    """A stack with no teams is told that nothing can run: no namespace then has a LocalQueue, and Kueue
    admits only workloads submitted to a LocalQueue (Kueue docs, "Local Queue"), so no GPU job could run."""
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    doc["config"].pop("gpufleet:teams")
    path = tmp_path / "Pulumi.noteams.yaml"
    path.write_text(yaml.safe_dump(doc))
    notes = build_plan(load_stack(path)).notes
    assert any(n.startswith("No teams (gpufleet:teams)") for n in notes)
    assert not any(n.startswith("No teams") for n in build_plan(load_example("dev")).notes)
