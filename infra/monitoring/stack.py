"""The metrics stack as data: kube-prometheus-stack values and every object gpufleet adds to a Prometheus.

Reaching the chart's Prometheus: with its defaults (`*SelectorNilUsesHelmValues: true`) the Prometheus the
chart creates selects only ServiceMonitors, PodMonitors and PrometheusRules labelled `release: <release>`.
We keep that default (an existing stack's other tenants are not swept in) and label every gpufleet object
with `release: <monitoring.release>`: our rules and the Kueue monitor here, the dcgm-exporter monitor through
the GPU operator's `dcgmExporter.serviceMonitor.additionalLabels`, the autoscaler's through its chart's
`serviceMonitor.selector`. The same labels work on `existing` when `monitoring.release` names that stack's
release, so `install` and `existing` produce the same objects.

The chart values (`install`) also give Prometheus a persistent volume with a size cap, Alertmanager the
receivers of `monitoring.alertmanager`, and kube-state-metrics gpufleet's Kueue Workload metrics (queue
starvation); on AWS they turn off the control-plane monitors EKS gives no targets for.
"""

from __future__ import annotations

from typing import Any

from infra.monitoring import exporter, extender
from infra.monitoring import metrics as m
from infra.monitoring.alerts import rule_groups
from infra.monitoring.dashboards import dashboards, to_json
from infra.spec import AlertReceiver, ClusterSpec, Monitoring, SecretKey
from scheduler.labels import GPU_OPERANDS_LABEL, KUEUE_NAMESPACE, MANAGED_BY, POOL_LABEL

MONITORING_API = "monitoring.coreos.com/v1"
SYSTEM_NODES = {"gpufleet.io/role": "system"}  # the AWS system node group's label (infra.aws.nodepools)
KUEUE_RELEASE = m.KUEUE_RELEASE  # scheduler.kueue_config.RELEASE_NAME: the chart's objects are named kueue-…
DASHBOARD_LABEL = ("grafana_dashboard", "1")  # the chart's grafana.sidecar.dashboards label / labelValue
RULES_NAME = "gpufleet-alerts"
DCGM_METRICS_CONFIGMAP = "gpufleet-dcgm-metrics"
# The Prometheus operator mounts each Secret of `alertmanagerSpec.secrets` at /etc/alertmanager/secrets/<name>
# (v0.93.0 pkg/alertmanager/statefulset.go: `secretsDir`, `path.Join(secretsDir, s)`).
ALERTMANAGER_SECRETS_DIR = "/etc/alertmanager/secrets"
# kube-prometheus-stack 88.5.3 values.yaml: these monitors scrape kube-controller-manager, etcd, kube-scheduler
# and kube-proxy pods, which EKS runs out of the cluster's reach (its control plane is managed; kube-proxy is an
# add-on without a metrics Service the chart selects), so their "down" alerts would fire for ever.
EKS_UNREACHABLE_MONITORS = ("kubeControllerManager", "kubeEtcd", "kubeScheduler", "kubeProxy")
# Kueue v0.19.2: Workloads are kueue.x-k8s.io, served as v1beta1 and v1beta2 (the storage version).
# kube-state-metrics exports only allow-listed node labels (`--metric-labels-allowlist`): the pool, and the GPU
# operator's operands switch the DCGM coverage alerts read.
NODE_LABELS_ALLOWLIST = f"nodes=[{POOL_LABEL},{GPU_OPERANDS_LABEL}]"
WORKLOAD_GVK = {"group": "kueue.x-k8s.io", "version": "v1beta2", "kind": "Workload"}


def release_labels(spec: ClusterSpec) -> dict[str, str]:
    return {"release": spec.cluster.monitoring.release}


def _meta(spec: ClusterSpec, name: str, namespace: str, **extra: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **release_labels(spec), **extra}}


def chart_fullname(spec: ClusterSpec) -> str:
    """`kube-prometheus-stack.fullname` (the chart's templates/_helpers.tpl at 88.5.3): the release name if it
    contains the chart name, else `<release>-kube-prometheus-stack`, cut to 26 characters."""
    release = spec.cluster.monitoring.release
    full = release if "kube-prometheus-stack" in release else f"{release}-kube-prometheus-stack"
    return full[:26].rstrip("-")


def prometheus_service_account(spec: ClusterSpec) -> str:
    """The ServiceAccount of the chart's Prometheus: `<fullname>-prometheus`."""
    return f"{chart_fullname(spec)}-prometheus"


def storage_spec(mon: Monitoring) -> dict[str, Any]:
    """`prometheusSpec.storageSpec`: a PVC per Prometheus replica from a volumeClaimTemplate (the chart's
    commented example, values.yaml `storageSpec`; prometheus-operator `StorageSpec.volumeClaimTemplate`)."""
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": mon.storage.size}},
    }
    if mon.storage.storage_class:
        claim["storageClassName"] = mon.storage.storage_class
    return {"volumeClaimTemplate": {"spec": claim}}


def pvc_retention_policy() -> dict[str, str]:
    """`prometheusSpec.persistentVolumeClaimRetentionPolicy`: the StatefulSet's PVCs go with it. The chart leaves
    it unset (kube-prometheus-stack 88.5.3 values.yaml `persistentVolumeClaimRetentionPolicy: {}`), so
    Kubernetes' default, Retain, applies and a destroyed stack leaves Prometheus' volume behind, billed
    (Kubernetes docs, "StatefulSets: PersistentVolumeClaim retention"). A scale-down keeps its PVCs, so scaling
    back up finds the data."""
    return {"whenDeleted": "Delete", "whenScaled": "Retain"}


def workload_state_metrics() -> dict[str, Any]:
    """kube-state-metrics CustomResourceState config (docs/metrics/extend/customresourcestate-metrics.md at
    v2.20.0): per Kueue Workload its creation time (an RFC 3339 string, which kube-state-metrics parses to a
    Unix timestamp) and one series per status condition (`type` label; value 1 for "True", 0 for "False" or
    "Unknown"). A workload without `QuotaReserved=True` is still waiting, however long ago it was created:
    Kueue 0.19 exports no per-workload pending age, and its wait histogram sees only admitted ones."""
    return {
        "kind": "CustomResourceStateMetrics",
        "spec": {
            "resources": [
                {
                    "groupVersionKind": dict(WORKLOAD_GVK),
                    "metricNamePrefix": m.WORKLOAD_PREFIX,
                    "labelsFromPath": {
                        "namespace": ["metadata", "namespace"],
                        "workload": ["metadata", "name"],
                        "queue": ["spec", "queueName"],
                    },
                    "metrics": [
                        {
                            "name": m.WORKLOAD_CREATED.removeprefix(m.WORKLOAD_PREFIX + "_"),
                            "help": "Creation time of the Kueue Workload (Unix seconds).",
                            "each": {"type": "Gauge", "gauge": {"path": ["metadata", "creationTimestamp"]}},
                        },
                        {
                            "name": m.WORKLOAD_CONDITION.removeprefix(m.WORKLOAD_PREFIX + "_"),
                            "help": "Status conditions of the Kueue Workload (1: True).",
                            "each": {
                                "type": "Gauge",
                                "gauge": {
                                    "path": ["status", "conditions"],
                                    "labelsFromPath": {"type": ["type"]},
                                    "valueFrom": ["status"],
                                },
                            },
                        },
                    ],
                }
            ]
        },
    }


def kube_state_metrics_values(spec: ClusterSpec) -> dict[str, Any]:
    """The kube-state-metrics subchart (8.4.0): the pool label and the GPU operator's operands label on
    kube_node_labels (the DCGM coverage alerts leave out nodes with operands off), and the Workload metrics with
    the list/watch rule they need (values.yaml `customResourceState.{enabled,config}`, `rbac.extraRules`)."""
    on_system = {"nodeSelector": dict(SYSTEM_NODES)} if spec.platform == "aws" else {}
    return {
        "metricLabelsAllowlist": [NODE_LABELS_ALLOWLIST],
        "customResourceState": {"enabled": True, "config": workload_state_metrics()},
        "rbac": {
            "extraRules": [
                {"apiGroups": [WORKLOAD_GVK["group"]], "resources": ["workloads"], "verbs": ["list", "watch"]}
            ]
        },
        **on_system,
    }


def secret_file(ref: SecretKey) -> str:
    return f"{ALERTMANAGER_SECRETS_DIR}/{ref.secret}/{ref.key}"


def _receiver(r: AlertReceiver) -> dict[str, Any]:
    """One Alertmanager v0.34 receiver. Secrets are read from files (`api_url_file`, `routing_key_file`,
    `auth_password_file`: config/notifiers.go, notify/pagerduty/config.go at v0.34.0), never inlined."""
    out: dict[str, Any] = {"name": r.name}
    if r.slack:
        slack: dict[str, Any] = {"api_url_file": secret_file(r.slack.webhook_url), "send_resolved": True}
        if r.slack.channel:
            slack["channel"] = r.slack.channel
        out["slack_configs"] = [slack]
    if r.pagerduty:
        out["pagerduty_configs"] = [
            {"routing_key_file": secret_file(r.pagerduty.routing_key), "send_resolved": True}
        ]
    if r.email:
        email: dict[str, Any] = {
            "to": r.email.to,
            "from": r.email.from_address,
            "smarthost": r.email.smarthost,
            "require_tls": r.email.require_tls,
            "send_resolved": True,
        }
        if r.email.username:
            email["auth_username"] = r.email.username
        if r.email.password:
            email["auth_password_file"] = secret_file(r.email.password)
        out["email_configs"] = [email]
    return out


def alertmanager_secrets(mon: Monitoring) -> list[str]:
    """The Secrets the receivers read, mounted into the Alertmanager pods (`alertmanager_secret_volumes`)."""
    am = mon.alertmanager
    if am is None:
        return []
    refs = [
        ref
        for r in am.receivers
        for ref in (
            r.slack.webhook_url if r.slack else None,
            r.pagerduty.routing_key if r.pagerduty else None,
            r.email.password if r.email else None,
        )
        if ref is not None
    ]
    return sorted({ref.secret for ref in refs})


def alertmanager_secret_volumes(mon: Monitoring) -> dict[str, list[dict[str, Any]]]:
    """`alertmanagerSpec.volumes` and `volumeMounts`: each receiver Secret at the path `alertmanagerSpec.secrets`
    would use (ALERTMANAGER_SECRETS_DIR/<name>), but optional. The operator mounts `secrets` as required
    volumes (prometheus-operator v0.93.0 pkg/alertmanager/statefulset.go), so an Alertmanager whose Secret does
    not exist yet sits in ContainerCreating; an optional one starts, and the kubelet fills the files in once the
    Secret is created. Alertmanager reads `*_file` keys when it notifies, not when it loads its configuration,
    so only that receiver fails until then."""
    names = alertmanager_secrets(mon)
    volume = {n: f"receiver-secret-{n.replace('.', '-')}"[:63].rstrip("-") for n in names}
    return {
        "volumes": [{"name": volume[n], "secret": {"secretName": n, "optional": True}} for n in names],
        "volumeMounts": [
            {"name": volume[n], "mountPath": f"{ALERTMANAGER_SECRETS_DIR}/{n}", "readOnly": True}
            for n in names
        ],
    }


def watchdog_route(receiver: str | None) -> dict[str, Any]:
    """The chart's Watchdog (an always-firing rule, its dead man's switch) to `receiver` every minute, so the
    service behind it notices within minutes when alerts stop flowing; to `null` when none is named."""
    route: dict[str, Any] = {"receiver": receiver or "null", "matchers": ['alertname = "Watchdog"']}
    if receiver:
        route |= {"group_wait": "0s", "group_interval": "1m", "repeat_interval": "1m"}
    return route


def alertmanager_config(mon: Monitoring) -> dict[str, Any] | None:
    """The chart's `alertmanager.config` (an Alertmanager configuration file): route by `severity`, unrouted
    alerts to `default` or the chart's `null` receiver (values.yaml `alertmanager.config`). None: the chart's."""
    am = mon.alertmanager
    if am is None:
        return None
    receivers = [_receiver(r) for r in am.receivers]
    if "null" not in {r.name for r in am.receivers}:  # the chart's sink, for Watchdog and unrouted alerts
        receivers.append({"name": "null"})
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": am.default or "null",
            "group_by": ["alertname", "severity"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [
                watchdog_route(am.watchdog),
                *(
                    {"receiver": name, "matchers": [f'severity = "{severity}"']}
                    for severity, name in sorted(am.routes.items())
                ),
            ],
        },
        "receivers": receivers,
        "templates": ["/etc/alertmanager/config/*.tmpl"],
    }


def crd_upgrade_values(spec: ClusterSpec) -> dict[str, Any]:
    """The chart's CRD upgrade job, on: Helm never upgrades CRDs it installed from `crds/`, so a chart bump
    would run the new operator on stale `monitoring.coreos.com` CRDs (kube-prometheus-stack 88.5.3 README
    "Upgrading chart"; `crds.upgradeJob`, values.yaml:33-43, applies them server-side in a pre-upgrade hook,
    taking them over from Helm with `forceConflicts`). Its busybox image is pinned (the chart's default is
    "latest"); on aws it runs on the system nodes like the operator."""
    job: dict[str, Any] = {
        "enabled": True,
        "forceConflicts": True,
        "image": {"busybox": {"tag": spec.versions.kps_crd_job_busybox}},
    }
    if spec.platform == "aws":
        job["nodeSelector"] = dict(SYSTEM_NODES)
    return {"enabled": True, "upgradeJob": job}


def kube_prometheus_stack_values(spec: ClusterSpec) -> dict[str, Any]:
    """Values for the pinned kube-prometheus-stack chart (`monitoring.prometheus: install`)."""
    mon = spec.cluster.monitoring
    on_system = {"nodeSelector": dict(SYSTEM_NODES)} if spec.platform == "aws" else {}
    alertmanager: dict[str, Any] = {"alertmanagerSpec": {**on_system}}
    if (config := alertmanager_config(mon)) is not None:
        alertmanager["config"] = config
        alertmanager["alertmanagerSpec"] |= alertmanager_secret_volumes(mon)
    off_on_eks = (
        {name: {"enabled": False} for name in EKS_UNREACHABLE_MONITORS} if spec.platform == "aws" else {}
    )
    return {
        "prometheus": {
            "prometheusSpec": {
                "retention": mon.retention,
                "retentionSize": mon.retention_bytes,
                "storageSpec": storage_spec(mon),
                "persistentVolumeClaimRetentionPolicy": pvc_retention_policy(),
                "scrapeInterval": mon.scrape_interval,
                "ruleSelectorNilUsesHelmValues": True,
                "serviceMonitorSelectorNilUsesHelmValues": True,
                "podMonitorSelectorNilUsesHelmValues": True,
                **on_system,
            }
        },
        "alertmanager": alertmanager,
        "crds": crd_upgrade_values(spec),
        "prometheusOperator": {**on_system},
        **off_on_eks,
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
        "kube-state-metrics": kube_state_metrics_values(spec),
    }


def dcgm_exporter_values(spec: ClusterSpec) -> dict[str, Any]:
    """The GPU operator's `dcgmExporter` section: the pod mapping each platform's exporter gets right
    (`infra.monitoring.exporter`), our counter list, a monitor Prometheus selects."""
    enabled = spec.cluster.monitoring.enabled
    return {
        "enabled": True,
        "env": exporter.env(spec),
        **exporter.operator_values(spec),
        "config": {"name": DCGM_METRICS_CONFIGMAP, "create": True, "data": m.dcgm_counters_csv()},
        "serviceMonitor": {
            "enabled": enabled,
            "interval": spec.cluster.monitoring.scrape_interval,
            "additionalLabels": release_labels(spec) if enabled else {},
            "relabelings": dcgm_relabelings() if enabled else [],
        },
    }


def dcgm_relabelings() -> list[dict[str, Any]]:
    """The exporter monitor's `relabelings`, which the Prometheus operator appends, last, to the target's
    `relabel_configs` (v0.93.0 pkg/prometheus/promcfg.go, generateServiceMonitorConfig: after its own rules
    that set the target labels `namespace`, `pod`, `container`, `service`, `job`, `endpoint`).
    - `node` from the pod's node, to join GPU series with kube-state-metrics' node labels (the pool);
    - labeldrop of the target's `namespace`, `pod`, `container` (the exporter pod's): relabel_configs run on the
      target before the scrape, so the exporter's own labels of those names are then kept as they are. Without
      it they clash with the target's and, with `honor_labels: false` (the GPU operator's monitor sets no
      honorLabels), Prometheus renames them `exported_namespace`/`exported_pod`/`exported_container`
      (https://prometheus.io/docs/prometheus/latest/configuration/configuration/#scrape_config, honor_labels);
      and `honorLabels: true` alone would still leave every free GPU with the exporter's `pod`."""
    return [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"},
        {"action": "labeldrop", "regex": "^(pod|namespace|container)$"},
    ]


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
    if extender.scraped(spec):
        objects.append(extender.pod_monitor(spec, {**MANAGED_BY, **release_labels(spec)}))
    if mon.grafana:
        objects += dashboard_configmaps(spec)
    return objects
