"""Preflight: check a stack against the AWS account before anything is created (`invoke preflight`)."""

from infra.preflight.findings import Finding, Severity
from infra.preflight.report import print_findings
from infra.preflight.run import aws_session, raise_on_errors, run_preflight

__all__ = ["Finding", "Severity", "aws_session", "print_findings", "raise_on_errors", "run_preflight"]
