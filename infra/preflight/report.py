"""Render preflight findings as one table, so every problem and its fix is visible at once."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from infra.preflight.findings import Finding, Severity

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.OK: "green"}


def findings_table(findings: list[Finding], title: str) -> Table:
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("subject", no_wrap=True)
    table.add_column("finding")
    table.add_column("fix")
    for f in findings:
        table.add_row(f"[{STYLE[f.severity]}]{f.severity.value}[/]", f.subject, f.message, f.fix)
    return table


def print_findings(findings: list[Finding], console: Console, stack: str) -> None:
    console.print(findings_table(findings, f"Preflight for stack {stack!r}"))
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
