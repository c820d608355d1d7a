"""Render preflight findings as one table, so every problem and its fix is visible at once."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from infra.preflight.findings import Finding, Severity
from infra.tables import Cell, print_table

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.OK: "green"}
HEAD = ["", "subject", "finding", "fix"]
# SSM parameter paths, ARNs and CLI subcommands run to 80 characters: a column as wide as the longest would leave
# the others no room, so a word longer than this folds across lines of its column (every character kept; the AWS
# commands are also printed whole after the table, to be copied). Narrower columns would hold a sentence a few
# words a line: below 3 x 40 columns of text the findings are printed one record each.
FOLD_OVER = 40


def findings_rows(findings: list[Finding]) -> list[list[Cell]]:
    """One row per finding; the severity coloured. Messages and fixes are shown as they are, never read as
    Rich markup: they quote names and commands from the stack and from AWS."""
    return [
        [Text(f.severity.value, style=STYLE[f.severity]), Text(f.subject), Text(f.message), Text(f.fix)]
        for f in findings
    ]


def _heading(row: Sequence[Cell]) -> Cell:
    severity, subject = row[0], row[1]
    return Text.assemble(severity, " ", subject) if isinstance(severity, Text) else f"{severity} {subject}"


def print_findings(findings: list[Finding], console: Console, stack: str) -> None:
    """The findings as a table whose cells wrap and are never cut (`infra.tables.print_table`); where the
    columns do not fit side by side (80 columns), one record per finding."""
    print_table(
        console,
        f"Preflight for stack {stack!r}",
        HEAD,
        findings_rows(findings),
        no_wrap={0},
        fold_over=FOLD_OVER,
        key=2,
        heading=_heading,
    )
    commands = [f.fix for f in findings if f.fix.startswith("aws ")]
    if commands:  # the table wraps long cells; print commands whole so they can be copied
        console.print("commands from the fixes above:")
        for command in commands:
            console.print(f"  {command}", soft_wrap=True, markup=False, highlight=False)
    counts = {s: sum(f.severity is s for f in findings) for s in Severity}
    verdict = "[bold red]FAILED[/]" if counts[Severity.ERROR] else "[green]passed[/]"
    console.print(
        f"preflight {verdict}: {counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), "
        f"{counts[Severity.OK]} check(s) ok"
    )
