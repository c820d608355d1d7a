"""The FragmentationAware extender made scrapeable, deployed as the stack deploys it: the metal stack with
`placement.strategy: FragmentationAware` and a Prometheus operator (`monitoring.prometheus: existing`) on the
twin. The real Pulumi engine applies the PodMonitor to the real apiserver, which checks it against the operator's
CRD; the PodMonitor selects the `gpu-binpack` pods the controllers created, each with the port it names; and the
extender, run with its sidecar's arguments, serves the metrics on that port and refuses the verbs there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from infra.monitoring.extender import COMPARED, MONITOR_NAME
from scheduler.labels import SCHEDULER_NAMESPACE
from tests.conftest import ROOT
from tests.support import eventually, require
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube

# GET /metrics and POST /prioritize on the scrape port, from inside the twin's network namespace.
PROBE = """
import json, sys, urllib.error, urllib.request
base = "http://127.0.0.1:" + sys.argv[1]
out = {}
with urllib.request.urlopen(base + "/metrics", timeout=10) as reply:
    out["metrics"] = reply.read().decode()
try:
    urllib.request.urlopen(urllib.request.Request(base + "/prioritize", data=b"{}", method="POST"), timeout=10)
    out["prioritize"] = 200
except urllib.error.HTTPError as exc:
    out["prioritize"] = exc.code
print(json.dumps(out))
"""


def test_the_pod_monitor_is_applied_and_its_port_serves_only_the_metrics(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    rooted = shutil.which("nsenter") is not None and os.geteuid() == 0
    require(rooted, "entering the twin's namespace needs nsenter and root")
    doc = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    doc["config"]["gpufleet:scheduling"] = {"placement": {"strategy": "FragmentationAware"}}
    doc["config"]["gpufleet:cluster"]["monitoring"] = {"prometheus": "existing"}
    path = tmp_path_factory.mktemp("stacks") / "Pulumi.metal-fa-scraped.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    twin = start_twin(tmp_path_factory, path)
    try:
        kube = Kube.of(twin)
        monitor = json.loads(
            kube.ok("get", "podmonitor", MONITOR_NAME, "-n", SCHEDULER_NAMESPACE, "-o", "json")
        )
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        selector = ",".join(f"{k}={v}" for k, v in monitor["spec"]["selector"]["matchLabels"].items())

        def named_ports() -> list[int] | None:
            pods = kube.items("pods", SCHEDULER_NAMESPACE, selector)
            ports = [
                port["containerPort"]
                for p in pods
                if p["status"].get("phase") == "Running"
                for c in p["spec"]["containers"]
                for port in c.get("ports", [])
                if port.get("name") == endpoint["port"]
            ]
            return ports if len(ports) == len(pods) > 0 else None

        ports = eventually(named_ports, "running gpu-binpack pods with the PodMonitor's port", 120)
        (port,) = set(ports)
        assert twin.info.get("pid"), "the twin's process, whose network namespace the probe enters"
        done = subprocess.run(["nsenter", "-t", str(twin.info["pid"]), "-n", sys.executable, "-c", PROBE, str(port)],
                              capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        seen = json.loads(done.stdout)
        families = {f.name: f.type for f in text_string_to_metric_families(seen["metrics"])}
        assert (
            families[COMPARED.removesuffix("_total")] == "counter"
        )  # the parser names a counter without _total
        assert seen["prioritize"] == 404
    finally:
        twin.stop()
