"""Errors raised by the simulator for bad input (exit code 2 in the CLI)."""

from __future__ import annotations


class TraceError(ValueError):
    """A trace file or a workload that cannot be simulated.

    The message names the file and the row (1-based data row, the header is line 1) and says what is accepted,
    so a CLI can print it as is.
    """

    def __init__(self, message: str, *, path: str | None = None, row: int | None = None) -> None:
        self.path = path
        self.row = row
        where = ""
        if path is not None:
            where = f"{path}"
            if row is not None:
                where += f", row {row} (line {row + 1})"
            where += ": "
        super().__init__(where + message)


class UnknownPolicyError(ValueError):
    """A policy name that is not registered; the message lists the valid names."""
