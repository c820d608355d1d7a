"""The objects the monitoring charts would create in a cluster, modelled for the twin: pure data, no processes.

The twin cannot render the charts (they are not downloadable), so each release object is modelled on its
template at the pinned version and cited where it is built: kube-prometheus-stack
88.5.3 `templates/prometheus/{prometheus,serviceaccount,clusterrole,clusterrolebinding}.yaml`,
`templates/alertmanager/{alertmanager,secret,service}.yaml`; kube-state-metrics 8.4.0
`templates/{deployment,service,servicemonitor}.yaml`; GPU operator v26.7.0
`assets/state-dcgm-exporter/{0400_service,0500_service_monitor,0800_daemonset}.yaml` with the custom edits of
`controllers/object_controls.go` (applyServiceMonitorCustomEdits: interval, honorLabels, relabelings,
additionalLabels from the stack's `dcgmExporter.serviceMonitor` values). `twin.monitoring` applies them and
runs the programs that stand behind them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infra.gpu_stack.gpu_operator import dcgm_exporter_values
from infra.monitoring.exporter import POD_UID_ENV, image_tag
from infra.monitoring.stack import kube_prometheus_stack_values, prometheus_service_account
from infra.spec import ClusterSpec
from scheduler.labels import GPU_OPERATOR_NAMESPACE
from twin import dcgm

EXPORTER = "nvidia-dcgm-exporter"
EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter"  # values.yaml dcgmExporter repository/image (v26.7.0)
DCGM_DEPLOY_LABEL = "nvidia.com/gpu.deploy.dcgm-exporter"  # the GPU operator's per-operand node label
PROMETHEUS_VERSION = "v3.14.0"
ALERTMANAGER_VERSION = "v0.34.0"


def fullname(spec: ClusterSpec) -> str:
    """`kube-prometheus-stack.fullname` (templates/_helpers.tpl): the release if it holds the chart name."""
    release = spec.cluster.monitoring.release
    full = release if "kube-prometheus-stack" in release else f"{release}-kube-prometheus-stack"
    return full[:26].rstrip("-")


def _labels(spec: ClusterSpec, app: str) -> dict[str, str]:
    release = spec.cluster.monitoring.release
    return {"app": app, "release": release, "app.kubernetes.io/instance": release,
            "app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/part-of": "kube-prometheus-stack"}  # fmt: skip


def prometheus_objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """kube-prometheus-stack's Prometheus: its ServiceAccount, ClusterRole, binding and the Prometheus resource
    with the selectors `*SelectorNilUsesHelmValues: true` gives (`release: <release>`) and the stack's
    prometheusSpec values (retention, retentionSize, storage, scrape interval)."""
    mon = spec.cluster.monitoring
    ns, full, release = mon.namespace, fullname(spec), mon.release
    values = kube_prometheus_stack_values(spec)
    pspec = dict(values.get("prometheus", {}).get("prometheusSpec", {}))
    account = prometheus_service_account(spec)
    by_release = {"matchLabels": {"release": release}}
    body: dict[str, Any] = {
        "version": PROMETHEUS_VERSION,
        "image": f"quay.io/prometheus/prometheus:{PROMETHEUS_VERSION}",
        "replicas": 1,
        "serviceAccountName": account,
        "serviceMonitorSelector": by_release,
        "serviceMonitorNamespaceSelector": {},
        "podMonitorSelector": by_release,
        "podMonitorNamespaceSelector": {},
        "ruleSelector": by_release,
        "ruleNamespaceSelector": {},
        "probeSelector": by_release,
        "scrapeConfigSelector": by_release,
        "portName": "http-web",
        "alerting": {
            "alertmanagers": [
                {
                    "namespace": ns,
                    "name": f"{full}-alertmanager",
                    "port": "http-web",
                    "pathPrefix": "/",
                    "apiVersion": "v2",
                }
            ]
        },
        "externalUrl": f"http://{full}-prometheus.{ns}:9090",
    }
    for key in ("retention", "retentionSize", "scrapeInterval", "evaluationInterval", "storage"):
        if pspec.get(key):
            body[key] = pspec[key]
    if pspec.get("storageSpec"):
        body["storage"] = pspec["storageSpec"]
    meta = {"namespace": ns, "labels": _labels(spec, "kube-prometheus-stack-prometheus")}
    rules = [
        {"apiGroups": [""], "resources": ["nodes", "nodes/metrics", "services", "endpoints", "pods"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": ["get", "list", "watch"]},
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
    ]  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"{full}-prometheus"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{full}-prometheus"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{full}-prometheus"},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
         "metadata": {"name": f"{full}-prometheus", **meta}, "spec": body},
    ]  # fmt: skip


def alertmanager_objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The chart's Alertmanager: its configuration Secret (`alertmanager.config`, templates/alertmanager/
    secret.yaml), the mounted secrets (`alertmanagerSpec.secrets`, `volumes`, `volumeMounts`), the Alertmanager
    resource and its Service."""
    mon = spec.cluster.monitoring
    ns, full = mon.namespace, fullname(spec)
    values = kube_prometheus_stack_values(spec).get("alertmanager", {})
    am_spec = dict(values.get("alertmanagerSpec", {}))
    config = values.get("config") or {
        # the chart's default (values.yaml alertmanager.config): everything to the `null` receiver
        "route": {"receiver": "null", "group_by": ["namespace"]},
        "receivers": [{"name": "null"}],
    }
    name = f"{full}-alertmanager"
    meta = {"namespace": ns, "labels": _labels(spec, "kube-prometheus-stack-alertmanager")}
    body = {
        "version": ALERTMANAGER_VERSION,
        "image": f"quay.io/prometheus/alertmanager:{ALERTMANAGER_VERSION}",
        "replicas": 1,
        "portName": "http-web",
        "externalUrl": f"http://{name}.{ns}:9093",
        **{k: am_spec[k] for k in ("secrets", "volumes", "volumeMounts", "retention") if am_spec.get(k)},
    }
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"alertmanager-{name}", **meta},
         "stringData": {"alertmanager.yaml": json.dumps(config)}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Alertmanager",
         "metadata": {"name": name, **meta}, "spec": body},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, **meta},
         "spec": {"selector": {"app.kubernetes.io/name": "alertmanager", "alertmanager": name},
                  "ports": [{"name": "http-web", "port": 9093, "targetPort": 9093}]}},
    ]  # fmt: skip


KSM_PORT = 8080


def ksm_name(spec: ClusterSpec) -> str:
    """kube-state-metrics' fullname in the release: `<release>-kube-state-metrics` (its _helpers.tpl)."""
    release = spec.cluster.monitoring.release
    return release if "kube-state-metrics" in release else f"{release}-kube-state-metrics"[:63]


def ksm_values(spec: ClusterSpec) -> dict[str, Any]:
    return dict(kube_prometheus_stack_values(spec).get("kube-state-metrics", {}))


def ksm_args(spec: ClusterSpec, config_file: Path | None) -> list[str]:
    """The arguments kube-state-metrics 8.4.0's Deployment passes (templates/deployment.yaml) for the stack's
    values: the metric label allowlist, and the custom resource state file when one is configured."""
    values = ksm_values(spec)
    args = [f"--port={KSM_PORT}"]
    allow = values.get("metricLabelsAllowlist") or []
    if allow:
        args.append(f"--metric-labels-allowlist={','.join(allow)}")
    if config_file is not None:
        args.append(f"--custom-resource-state-config-file={config_file}")
    return args


def ksm_custom_resource_state(spec: ClusterSpec) -> dict[str, Any] | None:
    crs = ksm_values(spec).get("customResourceState") or {}
    if not crs.get("enabled"):
        return None
    config = crs.get("config")
    return dict(config) if isinstance(config, dict) else None


def ksm_objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """kube-state-metrics' Deployment (its pod is what the real binary stands behind), Service and the chart's
    ServiceMonitor (`prometheus.monitor`: jobLabel app.kubernetes.io/name, honorLabels true as
    kube-prometheus-stack 88.5.3 sets it, the release label from `releaseLabel: true`)."""
    mon = spec.cluster.monitoring
    name, ns, release = ksm_name(spec), mon.namespace, mon.release
    selector = {"app.kubernetes.io/name": "kube-state-metrics", "app.kubernetes.io/instance": release}
    labels = {**selector, "release": release, "app.kubernetes.io/managed-by": "Helm"}
    meta = {"name": name, "namespace": ns, "labels": labels}
    on_system = kube_prometheus_stack_values(spec).get("kube-state-metrics", {}).get("nodeSelector", {})
    pod = {"containers": [{"name": "kube-state-metrics", "image": "registry.k8s.io/kube-state-metrics/"
                           "kube-state-metrics:v2.20.0", "ports": [{"name": "http", "containerPort": KSM_PORT}]}],
           **({"nodeSelector": on_system} if on_system else {})}  # fmt: skip
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                  "template": {"metadata": {"labels": labels}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": selector, "ports": [{"name": "http", "port": KSM_PORT, "targetPort": KSM_PORT}]}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": meta,
         "spec": {"jobLabel": "app.kubernetes.io/name", "selector": {"matchLabels": selector},
                  "endpoints": [{"port": "http", "honorLabels": True}]}},
    ]  # fmt: skip


def dcgm_exporter_objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The GPU operator's dcgm-exporter operand as it renders it from the stack's `dcgmExporter` values (GPU
    operator v26.7.0 assets/state-dcgm-exporter and controllers/object_controls.go `TransformDCGMExporter`): the
    counter ConfigMap; the DaemonSet with the image of `version` or the chart's default (`ImagePath`), the
    asset's env then the values' env, each set by name (`setContainerEnv` replaces), the pod-UID env, a token
    only when pod metadata is asked for (asset :27, `automountServiceAccountToken: false`, overridden at
    :1894-1898) and the host's PID namespace with `hostPID` (:1851-1853); the Service and the ServiceMonitor with
    the custom edits (applyServiceMonitorCustomEdits). `hostNetwork` (aws) is not played: kwok gives every pod
    of the twin an address of its own, and the stand-in listens on the exporter pod's."""
    values = dcgm_exporter_values(spec)
    ns = GPU_OPERATOR_NAMESPACE
    config = values.get("config", {})
    merged = {
        "DCGM_EXPORTER_LISTEN": ":9400",
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/dcgm-metrics.csv",
    }
    metadata = bool(values.get("enablePodUID") or values.get("enablePodLabels"))
    if values.get("enablePodUID"):
        merged[POD_UID_ENV] = "true"
    merged |= {e["name"]: e.get("value", "") for e in values.get("env", [])}
    env = [{"name": k, "value": v} for k, v in merged.items()]
    selector = {"app": EXPORTER}
    tag = values.get("version") or image_tag(spec)
    pod = {
        "nodeSelector": {DCGM_DEPLOY_LABEL: "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-node-critical",
        "automountServiceAccountToken": metadata,
        **({"hostPID": True} if values.get("hostPID") else {}),
        "containers": [{"name": EXPORTER, "image": f"{EXPORTER_IMAGE}:{tag}" if tag else EXPORTER_IMAGE,
                        "env": env, "ports": [{"name": "metrics", "containerPort": dcgm.PORT}]}],
    }  # fmt: skip
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config.get("name", EXPORTER), "namespace": ns},
         "data": {"dcgm-metrics.csv": config.get("data", "")}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {"name": EXPORTER, "namespace": ns, "labels": selector},
         "spec": {"selector": {"matchLabels": selector},
                  "template": {"metadata": {"labels": selector}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": EXPORTER, "namespace": ns, "labels": selector},
         "spec": {"selector": selector,
                  "ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"}]}},
    ]  # fmt: skip
    monitor = values.get("serviceMonitor", {})
    if monitor.get("enabled"):
        endpoint: dict[str, Any] = {"port": "gpu-metrics", "path": "/metrics"}
        if monitor.get("interval"):
            endpoint["interval"] = monitor["interval"]
        if monitor.get("honorLabels") is not None:
            endpoint["honorLabels"] = monitor["honorLabels"]
        if monitor.get("relabelings") is not None:
            endpoint["relabelings"] = monitor["relabelings"]
        objects.append(
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
             "metadata": {"name": EXPORTER, "namespace": ns,
                          "labels": {"app": EXPORTER, **monitor.get("additionalLabels", {})}},
             "spec": {"endpoints": [endpoint], "jobLabel": "app", "namespaceSelector": {"matchNames": [ns]},
                      "selector": {"matchLabels": selector}}}
        )  # fmt: skip
    return objects


__all__ = [
    "ALERTMANAGER_VERSION",
    "EXPORTER",
    "KSM_PORT",
    "PROMETHEUS_VERSION",
    "alertmanager_objects",
    "dcgm_exporter_objects",
    "fullname",
    "ksm_args",
    "ksm_custom_resource_state",
    "ksm_name",
    "ksm_objects",
    "prometheus_objects",
]
