"""Spec rules of `cluster.monitoring`: what needs a Prometheus, and where an existing one can be.

Run by the composer (`infra.rules`) on a catalog-resolved spec.
"""

from __future__ import annotations

from infra.spec import ClusterSpec


def monitoring_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """The monitoring rules, in the order they are reported."""
    _monitoring(spec, problems)
    _prometheus_on_a_new_cluster(spec, problems)


def _monitoring(spec: ClusterSpec, problems: list[str]) -> None:
    """Dashboards and idle reclaim read gpufleet's metrics and alerts: they need a Prometheus."""
    mon, at = spec.cluster.monitoring, "gpufleet:cluster.monitoring"
    if spec.cluster.orchestrator == "slurm":  # refused there as Kubernetes settings (infra.slurm.rules)
        return
    if mon.prometheus == "none":
        for key, on in (("grafana", mon.grafana), ("reclaimIdle", mon.reclaim_idle)):
            if on:
                problems.append(
                    f"{at}.{key}: needs prometheus: install or existing (it reads gpufleet's metrics)"
                )
        for i, team in enumerate(spec.teams):
            if team.reclaim_idle is not None:
                problems.append(
                    f"gpufleet:teams[{i}].reclaimIdle: needs {at}.prometheus: install or existing "
                    "(reclaim reads GPU utilisation)"
                )


def _prometheus_on_a_new_cluster(spec: ClusterSpec, problems: list[str]) -> None:
    """`existing` (and `monitoring: true`, which means it) says a Prometheus operator already runs; on aws the
    stack creates the cluster in the same `pulumi up`, so its `monitoring.coreos.com` CRDs cannot exist yet and
    every ServiceMonitor and PrometheusRule would fail half an hour into the first deploy."""
    if spec.platform == "aws" and spec.cluster.monitoring.prometheus == "existing":
        problems.append(
            "gpufleet:cluster.monitoring.prometheus: existing (what `monitoring: true` means) needs a Prometheus "
            "operator already running, but on aws this stack creates the cluster; use "
            "monitoring: {prometheus: install} (or none)"
        )
