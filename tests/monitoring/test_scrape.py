"""The labels Prometheus 3.x gives scraped series, as the Prometheus operator configures the scrape.

A stub dcgm-exporter and two stub Kueue replicas are scraped by a real Prometheus (the toolchain's v3.14.0) on
loopback. Each target carries the labels the operator gives a ServiceMonitor target (prometheus-operator
v0.93.0 pkg/prometheus/promcfg.go, generateServiceMonitorConfig: `namespace`, `pod`, `container` of the
exporter pod, `job`, `service`), then our relabelings as the operator appends them, and `honor_labels` is
false (the GPU operator's monitor sets no honorLabels). The stub serves the label set dcgm-exporter's pod
mapping writes (4.5.3-4.8.2 internal/pkg/transformation/const.go: `namespace`, `pod`, `container`), and
Kueue's gauges with `replica_role` from both replicas (Kueue v0.19.2 pkg/metrics/metrics.go).
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from infra.monitoring import metrics as m
from infra.monitoring.prometheus import Prometheus
from infra.monitoring.stack import dcgm_relabelings
from infra.monitoring.usage import QUERIES

GPU0 = 'gpu="0",UUID="GPU-0",Hostname="gpu-1"'
GPU1 = 'gpu="1",UUID="GPU-1",Hostname="gpu-1"'
EXPOSITION = {
    "/dcgm": (
        f"# TYPE {m.GPU_UTIL} gauge\n"
        f'{m.GPU_UTIL}{{{GPU0},namespace="team-llm",pod="train-0",container="main"}} 1\n'
        f"{m.GPU_UTIL}{{{GPU1}}} 0\n"
    ),
    **{
        f"/kueue-{role}": (
            f"# TYPE {m.KUEUE_USAGE} gauge\n"
            f'{m.KUEUE_USAGE}{{cohort="gpufleet",cluster_queue="research",flavor="h100",'
            f'resource="nvidia.com/gpu",replica_role="{role}"}} 8\n'
        )
        for role in ("leader", "follower")
    },
}
# The target labels the operator's own rules set for the exporter pod (before ours run).
EXPORTER_POD = {
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-x7k2p",
    "container": "nvidia-dcgm-exporter",
    "service": "nvidia-dcgm-exporter",
    "__meta_kubernetes_pod_node_name": "gpu-1",
}
RELABEL_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label"}


def relabel_config(rule: dict[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor RelabelConfig (camelCase) as the Prometheus relabel_config the operator writes."""
    return {RELABEL_KEYS.get(k, k): v for k, v in rule.items()}


class _Exporter(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = EXPOSITION.get(self.path, "").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(
    name: str, port: int, path: str, labels: dict[str, str], relabel: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "job_name": name,
        "honor_labels": False,
        "metrics_path": path,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": labels}],
        "relabel_configs": relabel,
    }


@pytest.fixture(scope="module")
def scraped(prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    exporter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    port = exporter.server_address[1]
    node_only = [r for r in dcgm_relabelings() if r.get("action") != "labeldrop"]
    kueue_pod = {"namespace": "kueue-system", "service": m.KUEUE_JOB}
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            _job(m.DCGM_JOB, port, "/dcgm", EXPORTER_POD, [relabel_config(r) for r in dcgm_relabelings()]),
            _job("without-labeldrop", port, "/dcgm", EXPORTER_POD, [relabel_config(r) for r in node_only]),
            {
                # Two replicas behind one Service: one job, two targets (`__metrics_path__` per target).
                **_job(m.KUEUE_JOB, port, "/", {}, []),
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{port}"],
                        "labels": {**kueue_pod, "pod": f"kueue-{role}", "__metrics_path__": f"/kueue-{role}"},
                    }
                    for role in ("leader", "follower")
                ],
            },
        ],
    }
    root = tmp_path_factory.mktemp("scrape")
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    web = _free_port()
    log = (root / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    prom = Prometheus(f"http://127.0.0.1:{web}", timeout_s=5)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (root / "prometheus.log").read_text()
            try:
                if len(prom.instant(f"{m.GPU_UTIL} or {m.KUEUE_USAGE}", time.time())) == 6:
                    break
            except Exception:  # not up yet
                pass
            assert time.monotonic() < deadline, (root / "prometheus.log").read_text()
            time.sleep(0.5)
        yield prom
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
        exporter.shutdown()


def _series(prom: Prometheus, query: str) -> list[dict[str, str]]:
    return sorted(
        (labels for labels, _ in prom.instant(query, time.time())), key=lambda lb: lb.get("gpu", "")
    )


def test_gpu_series_keep_the_pod_that_holds_the_gpu(scraped: Prometheus) -> None:
    held, free = _series(scraped, f'{m.GPU_UTIL}{{job="{m.DCGM_JOB}"}}')
    assert (held["namespace"], held["pod"], held["container"], held["node"]) == (
        "team-llm",
        "train-0",
        "main",
        "gpu-1",
    )
    assert not {k for k in held if k.startswith("exported_")}
    assert "pod" not in free and "namespace" not in free and free["node"] == "gpu-1"


def test_without_the_labeldrop_the_pod_mapping_is_renamed(scraped: Prometheus) -> None:
    """The harness sees the failure it guards against: Prometheus renames the clashing labels `exported_*`, and
    the free GPU carries the exporter's own pod."""
    held, free = _series(scraped, f'{m.GPU_UTIL}{{job="without-labeldrop"}}')
    assert held["exported_pod"] == "train-0" and held["pod"] == EXPORTER_POD["pod"]
    assert free["pod"] == EXPORTER_POD["pod"]


def test_the_idle_alert_and_usage_see_the_team(scraped: Prometheus) -> None:
    now = time.time()
    idle = scraped.instant(
        f'{m.GPU_UTIL}{{job="{m.DCGM_JOB}",namespace="team-llm",pod!=""}} < {m.IDLE_UTIL_PERCENT}', now
    )
    assert [labels["pod"] for labels, _ in idle] == ["train-0"]
    used = scraped.instant(QUERIES["idle_team"].replace('pod!=""', f'pod!="",job="{m.DCGM_JOB}"'), now)
    assert [(labels["namespace"], value) for labels, value in used] == [("team-llm", 1.0)]


def test_kueue_usage_counts_the_leader_once(scraped: Prometheus) -> None:
    """Both replicas report 8 GPUs for research; the report's query counts them once."""
    assert len(_series(scraped, m.KUEUE_USAGE)) == 2
    (allocated,) = scraped.instant(QUERIES["allocated"], time.time())
    assert allocated[1] == 8.0
