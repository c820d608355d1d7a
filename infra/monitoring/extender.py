"""The FragmentationAware extender to the Prometheus: how it is scraped, and the series a platform owner decides
on.

The extender is a sidecar of the `gpu-binpack` scheduler pods (scheduler.extender.manifests), with no Service:
filter and prioritize answer on the pod's loopback only, and with monitoring on a second listener serves
`GET /metrics` on the pod network, at the container port `metrics`. A PodMonitor scrapes that port on every
replica: the leader's sidecar counts the pods it is asked about, the standby's keeps a warm view and counts
nothing. Its targets' `job` is `<namespace>/<PodMonitor name>`: the operator's default without `jobLabel`
(prometheus-operator v0.93.0 pkg/prometheus/promcfg.go, generatePodMonitorConfig).

The recording rules turn the counters and gauges of scheduler.extender.metrics into the two numbers
docs/scheduling.md ("Deciding on FragmentationAware") reads:
- the share of compared pods where FGD chose another node than the profile's best, over a day, summed over the
  replicas (a failover moves the counting to the other one; `increase` takes each pod's restarts);
- per pool, fragmented GPUs as a share of unallocated ones; both replicas report each pool from their own view
  of the same cluster, so `max by (pool)` keeps one.
One alert only, that the data can be believed: an extender target down (the pod runs, its sidecar does not
answer). On the leader that also means the profile places alone: the scheduler skips an ignorable extender
that does not answer (scheduler.placement.extender_entry).
"""

from __future__ import annotations

from typing import Any

from infra.monitoring.runbook import alert
from infra.spec import ClusterSpec
from scheduler.extender.manifests import METRICS_PORT_NAME
from scheduler.extender.metrics import PREFIX
from scheduler.labels import SCHEDULER_NAMESPACE
from scheduler.placement import APP

MONITOR_NAME = "gpufleet-extender"
JOB = f"{SCHEDULER_NAMESPACE}/{MONITOR_NAME}"
# The extender's families as prometheus_client renders them: counters gain `_total` (scheduler.extender.metrics).
COMPARED = f"{PREFIX}_compared_total"
DISAGREEMENTS = f"{PREFIX}_disagreements_total"
FRAGMENTED = f"{PREFIX}_fragmented_gpus"
UNALLOCATED = f"{PREFIX}_unallocated_gpus"
SHADOW = f"{PREFIX}_shadow"
EXPORTED = frozenset({COMPARED, DISAGREEMENTS, FRAGMENTED, UNALLOCATED, SHADOW})
# gpufleet's records of them.
RECORD_DISAGREEMENT = "gpufleet:extender_disagreement:ratio1d"
RECORD_COMPARED = "gpufleet:extender_compared:increase1d"
RECORD_FRAGMENTED = "gpufleet:extender_fragmented:ratio"
RECORDED = frozenset({RECORD_DISAGREEMENT, RECORD_COMPARED, RECORD_FRAGMENTED})
DOWN_ALERT = "FragmentationAwareExtenderDown"
WINDOW = "1d"


def scraped(spec: ClusterSpec) -> bool:
    """The stack places with the extender and runs a Prometheus operator that can scrape it."""
    return spec.scheduling.placement.strategy == "FragmentationAware" and spec.cluster.monitoring.enabled


def pod_monitor(spec: ClusterSpec, labels: dict[str, str]) -> dict[str, Any]:
    """A PodMonitor (monitoring.coreos.com/v1, v0.93.0 CRD: `spec.selector`, `spec.podMetricsEndpoints[]`
    `port` (the Pod port's name), `path`, `interval`) selecting the scheduler's pods by their template labels in
    the scheduler's namespace, where it lives (no `namespaceSelector`: the operator then looks in the monitor's
    own namespace). `labels`: the `release` label the chart's Prometheus selects by, and gpufleet's own."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": MONITOR_NAME, "namespace": SCHEDULER_NAMESPACE, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(APP)},
            "podMetricsEndpoints": [
                {
                    "port": METRICS_PORT_NAME,
                    "path": "/metrics",
                    "interval": spec.cluster.monitoring.scrape_interval,
                }
            ],
        },
    }


def recording_rules() -> list[dict[str, Any]]:
    """The records a platform owner reads (module docstring); none is written where its denominator is 0."""
    compared = f'sum(increase({COMPARED}{{job="{JOB}"}}[{WINDOW}]))'
    disagreed = f'sum(increase({DISAGREEMENTS}{{job="{JOB}"}}[{WINDOW}]))'
    fragmented = f'max by (pool) ({FRAGMENTED}{{job="{JOB}"}})'
    unallocated = f'max by (pool) ({UNALLOCATED}{{job="{JOB}"}})'
    return [
        {"record": RECORD_COMPARED, "expr": compared},
        {"record": RECORD_DISAGREEMENT, "expr": f"{disagreed} / ({compared} > 0)"},
        {"record": RECORD_FRAGMENTED, "expr": f"{fragmented} / ({unallocated} > 0)"},
    ]


def down_alert(spec: ClusterSpec) -> dict[str, Any]:
    return alert(
        spec,
        DOWN_ALERT,
        f'up{{job="{JOB}"}} == 0',
        "warning",
        "Prometheus cannot scrape the FragmentationAware extender of {{ $labels.pod }}: its placement "
        "figures are stale, and if that pod's scheduler leads, the packing profile places alone.",
        "10m",
    )


def rule_group(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The extender's rule group, or none when nothing scrapes it."""
    if not scraped(spec):
        return []
    return [{"name": "gpufleet.placement", "rules": [*recording_rules(), down_alert(spec)]}]
