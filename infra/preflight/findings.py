"""One preflight result: what was checked, how bad it is, and the exact next step to fix it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"  # the deploy would fail or end up without the capacity the spec asks for
    WARNING = "warning"  # the deploy can go ahead, but something will need attention soon
    OK = "ok"  # checked and fine: listed so the report shows what was covered


@dataclass(frozen=True)
class Finding:
    severity: Severity
    subject: str  # what the finding is about, e.g. `nodePools[h100-train]` or `quota L-417A185B`
    message: str
    fix: str = ""  # a command or a spec change; empty for OK findings

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR


def ok(subject: str, message: str) -> Finding:
    return Finding(Severity.OK, subject, message)


def error(subject: str, message: str, fix: str) -> Finding:
    return Finding(Severity.ERROR, subject, message, fix)


def warning(subject: str, message: str, fix: str) -> Finding:
    return Finding(Severity.WARNING, subject, message, fix)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.is_error]
