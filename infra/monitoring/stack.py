"""The metrics stack as data: kube-prometheus-stack values and every object gpufleet adds to a Prometheus.

Reaching the chart's Prometheus: with its defaults (`*SelectorNilUsesHelmValues: true`) the Prometheus the
chart creates selects only ServiceMonitors, PodMonitors and PrometheusRules labelled `release: <release>`.
We keep that default (an existing stack's other tenants are not swept in) and label every gpufleet object
with `release: <monitoring.release>`: our rules and the Kueue monitor here, the dcgm-exporter monitor through
the GPU operator's `dcgmExporter.serviceMonitor.additionalLabels`, the autoscaler's through its chart's
`serviceMonitor.selector`. The same labels work on `existing` when `monitoring.release` names that stack's
release, so `install` and `existing` produce the same objects.
"""

from __future__ import annotations

from typing import Any

from infra.monitoring import metrics as m
from infra.monitoring.alerts import rule_groups
from infra.monitoring.dashboards import dashboards, to_json
from infra.spec import ClusterSpec
from scheduler.labels import KUEUE_NAMESPACE, MANAGED_BY

MONITORING_API = "monitoring.coreos.com/v1"
SYSTEM_NODES = {"gpufleet.io/role": "system"}  # the AWS system node group's label (infra.aws.nodepools)
KUEUE_RELEASE = "kueue"  # scheduler.kueue_config.RELEASE_NAME: the chart's objects are named kueue-…
DASHBOARD_LABEL = ("grafana_dashboard", "1")  # the chart's grafana.sidecar.dashboards label / labelValue
RULES_NAME = "gpufleet-alerts"
DCGM_METRICS_CONFIGMAP = "gpufleet-dcgm-metrics"


def release_labels(spec: ClusterSpec) -> dict[str, str]:
    return {"release": spec.cluster.monitoring.release}


def _meta(spec: ClusterSpec, name: str, namespace: str, **extra: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **release_labels(spec), **extra}}


def prometheus_service_account(spec: ClusterSpec) -> str:
    """The ServiceAccount of the chart's Prometheus: `<fullname>-prometheus`, where fullname is the release name
    if it contains the chart name, else `<release>-kube-prometheus-stack`, cut to 26 characters
    (`kube-prometheus-stack.fullname` in the chart's templates/_helpers.tpl at 88.5.3)."""
    release = spec.cluster.monitoring.release
    full = release if "kube-prometheus-stack" in release else f"{release}-kube-prometheus-stack"
    return f"{full[:26].rstrip('-')}-prometheus"


def kube_prometheus_stack_values(spec: ClusterSpec) -> dict[str, Any]:
    """Values for the pinned kube-prometheus-stack chart (`monitoring.prometheus: install`)."""
    mon = spec.cluster.monitoring
    on_system = {"nodeSelector": dict(SYSTEM_NODES)} if spec.platform == "aws" else {}
    return {
        "prometheus": {
            "prometheusSpec": {
                "retention": mon.retention,
                "scrapeInterval": mon.scrape_interval,
                "ruleSelectorNilUsesHelmValues": True,
                "serviceMonitorSelectorNilUsesHelmValues": True,
                "podMonitorSelectorNilUsesHelmValues": True,
                **on_system,
            }
        },
        "alertmanager": {"alertmanagerSpec": {**on_system}},
        "prometheusOperator": {**on_system},
        "grafana": {
            "enabled": mon.grafana,
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": DASHBOARD_LABEL[0],
                    "labelValue": DASHBOARD_LABEL[1],
                    "searchNamespace": "ALL",
                }
            },
        },
        "kubeStateMetrics": {"enabled": True},
        # kube-state-metrics chart 8.4.0: the pool label on kube_node_labels (per-pool alerts and dashboards).
        "kube-state-metrics": {"metricLabelsAllowlist": ["nodes=[gpufleet.io/pool]"], **on_system},
    }


def dcgm_exporter_values(spec: ClusterSpec) -> dict[str, Any]:
    """The GPU operator's `dcgmExporter` section: pod mapping, our counter list, a monitor Prometheus selects."""
    enabled = spec.cluster.monitoring.enabled
    return {
        "enabled": True,
        # Pod mapping: GPU series carry the namespace/pod/container holding the GPU (kubelet pod-resources).
        "env": [{"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"}],
        "config": {"name": DCGM_METRICS_CONFIGMAP, "create": True, "data": m.dcgm_counters_csv()},
        "serviceMonitor": {
            "enabled": enabled,
            "interval": spec.cluster.monitoring.scrape_interval,
            "additionalLabels": release_labels(spec) if enabled else {},
            # The node name as `node`, to join GPU series with kube-state-metrics' node labels (the pool).
            "relabelings": [
                {
                    "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                    "targetLabel": "node",
                    "action": "replace",
                }
            ]
            if enabled
            else [],
        },
    }


def autoscaler_service_monitor_values(spec: ClusterSpec) -> dict[str, Any]:
    """The cluster-autoscaler chart's `serviceMonitor` values: its `selector` map becomes the monitor's labels
    (charts/cluster-autoscaler values.yaml: enabled, interval, namespace, selector, path)."""
    mon = spec.cluster.monitoring
    return {
        "enabled": True,
        "interval": mon.scrape_interval,
        "namespace": mon.namespace,
        "selector": release_labels(spec),
        "path": "/metrics",
    }


def karpenter_service_monitor_values(spec: ClusterSpec) -> dict[str, Any]:
    """The Karpenter chart's `serviceMonitor` values (chart values.yaml, v1.14.1: enabled, additionalLabels),
    for the Karpenter release when `cluster.autoscaler: karpenter` and monitoring is enabled."""
    return {"enabled": True, "additionalLabels": release_labels(spec)}


def prometheus_rule(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": _meta(spec, RULES_NAME, spec.cluster.monitoring.namespace),
        "spec": {"groups": rule_groups(spec)},
    }


def kueue_service_monitor(spec: ClusterSpec) -> dict[str, Any]:
    """Kueue's metrics Service (port `https`, authn/authz by token), as the Kueue chart's own monitor scrapes it
    (charts/kueue/templates/prometheus/monitor.yaml at v0.19.2), but with the `release` label."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
        "metadata": _meta(spec, "gpufleet-kueue", KUEUE_NAMESPACE),
        "spec": {
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "kueue",
                    "app.kubernetes.io/instance": KUEUE_RELEASE,
                    "app.kubernetes.io/component": "metrics-service",
                }
            },
            "endpoints": [
                {
                    "path": "/metrics",
                    "port": "https",
                    "scheme": "https",
                    "interval": spec.cluster.monitoring.scrape_interval,
                    "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
                    "tlsConfig": {"insecureSkipVerify": True},
                }
            ],
        },
    }


def kueue_metrics_reader_binding(spec: ClusterSpec) -> dict[str, Any]:
    """Kueue serves /metrics only to subjects allowed `get` on it: the chart's `kueue-metrics-reader` role."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "gpufleet-prometheus-kueue-metrics", "labels": dict(MANAGED_BY)},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"{KUEUE_RELEASE}-metrics-reader",
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": prometheus_service_account(spec),
                "namespace": spec.cluster.monitoring.namespace,
            }
        ],
    }


def dashboard_configmaps(spec: ClusterSpec) -> list[dict[str, Any]]:
    key, value = DASHBOARD_LABEL
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(
                spec, name.removesuffix(".json"), spec.cluster.monitoring.namespace, **{key: value}
            ),
            "data": {name: to_json(board)},
        }
        for name, board in dashboards(spec).items()
    ]


def monitoring_objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every object gpufleet adds to the cluster's Prometheus (empty with `prometheus: none`)."""
    mon = spec.cluster.monitoring
    if not mon.enabled:
        return []
    # The binding names kube-prometheus-stack's Prometheus account: ours on install; on existing, that of the
    # stack released as `monitoring.release` in `monitoring.namespace` (docs/operations.md).
    objects = [prometheus_rule(spec), kueue_service_monitor(spec), kueue_metrics_reader_binding(spec)]
    if mon.grafana:
        objects += dashboard_configmaps(spec)
    return objects
