"""An alerting rule as gpufleet writes every one: its severity, summary and the runbook section it points to.

Shared by the rule groups of each room (infra.monitoring.alerts, infra.monitoring.extender); what each alert
means and what to do is in docs/operations.md, one section per alert.
"""

from __future__ import annotations

from typing import Any

from infra.spec import ClusterSpec

RUNBOOK_DOC = "docs/operations.md"  # the runbook sections, in the gpufleet repository


def runbook(spec: ClusterSpec, name: str) -> dict[str, str]:
    """`runbook_url` (an absolute URL, what Alertmanager and Grafana link) when `monitoring.runbookBaseUrl` is
    set, else `runbook`: the section's path in the repository, which is not a URL and is not presented as one."""
    base = spec.cluster.monitoring.runbook_base_url
    if base:
        return {"runbook_url": f"{base}#{name.lower()}"}
    return {"runbook": f"{RUNBOOK_DOC}#{name.lower()}"}


def alert(
    spec: ClusterSpec, name: str, expr: str, severity: str, summary: str, for_: str = "0m", **labels: str
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": summary, **runbook(spec, name)},
    }
