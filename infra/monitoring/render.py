"""`invoke render`: the monitoring side for GitOps, in `<manifests>/monitoring/`.

- one YAML file per object (PrometheusRule, ServiceMonitor, RBAC, dashboard ConfigMaps) + kustomization.yaml;
- `rules/gpufleet-rules.yaml`: the same rule groups as a plain Prometheus rule file (promtool, non-operator
  Prometheus servers);
- `dashboards/*.json`: the Grafana dashboards for import by hand;
- chart values beside them: kube-prometheus-stack (install) and NVSentinel (self-healing on existing clusters).
The folder is rewritten as a whole, so objects removed from the spec disappear from Git too.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from infra.monitoring.alerts import rule_groups
from infra.monitoring.dashboards import dashboards, to_json
from infra.monitoring.health import installs_nvsentinel, nvsentinel_values
from infra.monitoring.stack import kube_prometheus_stack_values, monitoring_objects
from infra.spec import ClusterSpec
from scheduler.manifests import dump

FOLDER = "monitoring"


def object_file(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), *([meta["namespace"]] if meta.get("namespace") else []), meta["name"]]
    return "-".join(parts) + ".yaml"


def render_monitoring(spec: ClusterSpec, manifests: Path) -> list[Path]:
    """Write the monitoring folder under `manifests`; nothing (and no folder) when monitoring is off."""
    out = manifests / FOLDER
    if out.exists():
        shutil.rmtree(out)
    mon = spec.cluster.monitoring
    written: list[Path] = []
    if mon.enabled:
        out.mkdir(parents=True)
        objects = monitoring_objects(spec)
        for obj in objects:
            path = out / object_file(obj)
            path.write_text(dump(obj))
            written.append(path)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [object_file(o) for o in objects],
        }
        (out / "kustomization.yaml").write_text(dump(kustomization))
        (out / "rules").mkdir()
        (out / "rules/gpufleet-rules.yaml").write_text(
            yaml.safe_dump({"groups": rule_groups(spec)}, sort_keys=False)
        )
        (out / "dashboards").mkdir()
        for name, board in dashboards(spec).items():
            (out / "dashboards" / name).write_text(to_json(board))
        written += [out / "kustomization.yaml", out / "rules/gpufleet-rules.yaml"]
        written += sorted((out / "dashboards").iterdir())
        if mon.prometheus == "install":
            (out / "kube-prometheus-stack-values.yaml").write_text(dump(kube_prometheus_stack_values(spec)))
            written.append(out / "kube-prometheus-stack-values.yaml")
    if installs_nvsentinel(spec):
        out.mkdir(parents=True, exist_ok=True)
        (out / "nvsentinel-values.yaml").write_text(dump(nvsentinel_values(spec)))
        written.append(out / "nvsentinel-values.yaml")
    return written
