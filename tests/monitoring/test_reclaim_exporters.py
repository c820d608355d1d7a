"""Each dcgm-exporter behaviour the stacks could meet, scraped by a real Prometheus, and `invoke reclaim --apply`
acting on what it scraped: a busy job is never deactivated, a truly idle one still is.

The twin's stand-in (`twin.dcgm`) serves the series of four exporter deployments (`infra.monitoring.exporter`),
each for two nodes: `w-<behaviour>`, three whole H100s (a busy job's pod at 90%, an idle job's pod at 0%, one
GPU free), and `s-<behaviour>`, one L40S time-sliced in two (a busy pod at 90%, then an idle one at 0%). The
toolchain's Prometheus v3.14.0 scrapes them every second through the relabelling the stack gives the GPU
operator's monitor (`dcgm_relabelings`). One team per behaviour reclaims after 20 s; every workload was warned
long ago, so a run that trusts a workload to be idle deactivates it. kubectl is invoke's MockContext, answering
with the same pods the stand-in serves.

What each behaviour serves, from dcgm-exporter's source at its tag (`twin.dcgm`):
- per-process (the `existing` stacks with time-sliced pools, 4.5.3-4.8.2 semantics): each pod its own share,
  the GPU's own series beside it;
- unmapped-zero (the same without the token and host PIDs, R1): every pod 0, the GPU's own series busy;
- device-copy (4.5.2-4.8.1 with KUBERNETES_VIRTUAL_GPUS, R4): every sharing pod the GPU's whole value, the free
  GPU's series gone;
- one-pod (aws: 4.5.2-4.8.1 without it): one pod per GPU with the GPU's whole value, the other sharing pod
  without a series.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from invoke import MockContext, Result

import tasks
from infra.monitoring import metrics as m
from infra.monitoring.exporter import Deployment, Mapping, deployment
from infra.monitoring.prometheus import Prometheus
from infra.monitoring.reclaim import WARNED
from infra.monitoring.stack import dcgm_relabelings
from tests.conftest import load_example
from tests.monitoring.test_scrape import EXPORTER_POD, relabel_config
from tests.support import eventually
from twin import dcgm

UTIL = dcgm.UTIL_ANNOTATION
AFTER_S = 20
METAL = deployment(load_example("metal"))  # existing, with a time-sliced pool
AWS = deployment(load_example("example-prod"))
DEPLOYMENTS: dict[Mapping, Deployment] = {
    Mapping.PER_PROCESS: Deployment("4.5.3-4.8.2", virtual_gpus=True, api_token=True, host_pid=True),
    Mapping.UNMAPPED_ZERO: Deployment("4.5.3-4.8.2", virtual_gpus=True, api_token=False, host_pid=False),
    Mapping.DEVICE_COPY: Deployment("4.5.2-4.8.1", virtual_gpus=True, api_token=False, host_pid=False),
    Mapping.ONE_POD: Deployment("4.5.2-4.8.1", virtual_gpus=False, api_token=False, host_pid=False),
}
# What `reclaim --apply` does to each job under each behaviour; every job was warned, so one reclaim finds busy
# loses its warning ("clear").
EXPECTED: dict[Mapping, dict[str, str]] = {
    Mapping.PER_PROCESS: {"busy": "clear", "idle": "deactivate", "sbusy": "clear", "sidle": "deactivate"},
    # the busy job's zero sits on a busy GPU: refused; so is everything on the shared busy GPU
    Mapping.UNMAPPED_ZERO: {"busy": "refuse", "idle": "deactivate", "sbusy": "refuse", "sidle": "refuse"},
    # the idle sharing pod carries the GPU's 90%: it looks busy, and is left alone
    Mapping.DEVICE_COPY: {"busy": "clear", "idle": "deactivate", "sbusy": "clear", "sidle": "clear"},
    # the later sharing pod carries the GPU's 90%; the other has no series at all: refused
    Mapping.ONE_POD: {"busy": "clear", "idle": "deactivate", "sbusy": "refuse", "sidle": "clear"},
}


def test_the_stacks_deploy_the_two_behaviours_modelled_here() -> None:
    assert METAL is not None and METAL.mapping is Mapping.PER_PROCESS
    assert AWS is not None and AWS.mapping is Mapping.ONE_POD and AWS.release == "4.5.2-4.8.1"


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, gpus: int, replicas: int = 1) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    resource = "nvidia.com/gpu"
    if replicas > 1:
        labels |= {"nvidia.com/gpu.replicas": str(replicas), "nvidia.com/gpu.product": "NVIDIA-L40S"}
        resource = "nvidia.com/gpu.shared"
    return {"metadata": {"name": name, "labels": labels, "annotations": {}},
            "status": {"capacity": {resource: str(gpus * replicas)}}}  # fmt: skip


def _pod(ns: str, job: str, node: str, util: int, resource: str, created: str) -> dict[str, Any]:
    uid = f"uid-{ns}-{job}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-0",
            "namespace": ns,
            "uid": f"{uid}-pod",
            "creationTimestamp": created,
            "annotations": {UTIL: str(util)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid, "controller": True}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {"limits": {resource: "1"}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def _workload(ns: str, job: str, now: float) -> dict[str, Any]:
    uid = f"uid-{ns}-{job}"
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{job}",
            "namespace": ns,
            "uid": f"wl-{uid}",
            "annotations": {WARNED: _rfc3339(now - 7200)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid, "controller": True}],
        },
        "spec": {},
        "status": {"conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": _rfc3339(now - 18000)}]},
    }  # fmt: skip


class Cluster:
    """Nodes, pods and Workloads per behaviour; the stand-in exporters serving them."""

    def __init__(self, now: float) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, list[dict[str, Any]]] = {}
        self.workloads: dict[str, list[dict[str, Any]]] = {}
        self.shapes: dict[str, dcgm.Shape] = {}
        for mapping, found in DEPLOYMENTS.items():
            ns, whole, shared = str(mapping), f"w-{mapping}", f"s-{mapping}"
            self.nodes |= {whole: _node(whole, 3), shared: _node(shared, 1, replicas=2)}
            env = {"NVIDIA_RESOURCE_NAMES": "nvidia.com/gpu.shared"}
            if found.virtual_gpus:
                env["KUBERNETES_VIRTUAL_GPUS"] = "true"
            shape = dcgm.Shape(env, found)
            self.shapes |= {whole: shape, shared: shape}
            self.pods[ns] = [
                _pod(ns, "busy", whole, 90, "nvidia.com/gpu", "2026-01-01T00:00:00Z"),
                _pod(ns, "idle", whole, 0, "nvidia.com/gpu", "2026-01-01T00:00:01Z"),
                _pod(ns, "sbusy", shared, 90, "nvidia.com/gpu.shared", "2026-01-01T00:00:02Z"),
                _pod(ns, "sidle", shared, 0, "nvidia.com/gpu.shared", "2026-01-01T00:00:03Z"),
            ]
            self.workloads[ns] = [_workload(ns, job, now) for job in ("busy", "idle", "sbusy", "sidle")]
        self.counters = dcgm.parse_counters(m.dcgm_counters_csv())
        self.servers: dict[str, tuple[int, dcgm.ExporterServer]] = {}

    def fetch(self, node: str) -> dcgm.Fetch:
        def get() -> tuple[dict[str, Any], list[dict[str, Any]], list[dcgm.Counter], dcgm.Shape]:
            pods = [p for ps in self.pods.values() for p in ps if p["spec"]["nodeName"] == node]
            return self.nodes[node], pods, self.counters, self.shapes[node]

        return get

    def start(self) -> None:
        for node in self.nodes:
            port = _free_port()
            self.servers[node] = (port, dcgm.ExporterServer("127.0.0.1", self.fetch(node), port).start())

    def stop(self) -> None:
        for _, server in self.servers.values():
            server.stop()

    def kubectl(self) -> MockContext:
        results: dict[Any, Result] = {
            re.compile(r"kubectl version --client"): Result(stdout="Client Version: v1.35.0"),
            re.compile(r"kubectl patch .*"): Result(stdout="{}"),
            re.compile(r"kubectl create -f - -o json"): Result(stdout="{}"),
        }
        for ns in self.pods:
            results[re.compile(rf"kubectl get pods -n {ns} -o json")] = Result(
                stdout=json.dumps({"items": self.pods[ns]})
            )
            results[re.compile(rf"kubectl get workloads.kueue.x-k8s.io -n {ns} -o json")] = Result(
                stdout=json.dumps({"items": self.workloads[ns]})
            )
        results[re.compile(r"kubectl get \S+ \S+ -n \S+ -o json")] = Result(exited=1, stderr="NotFound")
        return MockContext(run=results, repeat=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def scraped(prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    cluster = Cluster(time.time())
    cluster.start()
    relabel = [relabel_config(r) for r in dcgm_relabelings()]
    targets = [
        {"targets": [f"127.0.0.1:{port}"],
         "labels": {**EXPORTER_POD, "pod": f"nvidia-dcgm-exporter-{node}", "__meta_kubernetes_pod_node_name": node}}
        for node, (port, _) in cluster.servers.items()
    ]  # fmt: skip
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": m.DCGM_JOB,
                "honor_labels": False,
                "static_configs": targets,
                "relabel_configs": relabel,
            }
        ],
    }
    root = tmp_path_factory.mktemp("reclaim-exporters")
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (root / "prometheus.log").open("w")
    web = _free_port()
    server = subprocess.Popen(
        [prometheus_bin, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{web}"
    prom = Prometheus(url, timeout_s=5)

    def window_covered() -> bool:
        assert server.poll() is None, (root / "prometheus.log").read_text()
        try:  # every pod series the exporters serve has a sample from before the reclaim window
            return len(prom.instant(f"{m.UP} offset {AFTER_S + 2}s", time.time())) == len(cluster.servers)
        except Exception:  # not up yet
            return False

    try:
        eventually(window_covered, f"{AFTER_S + 2}s of scrapes of every exporter", timeout=90, every=1)
        yield cluster, url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
        cluster.stop()


def _series(url: str, query: str) -> list[tuple[dict[str, str], float]]:
    return Prometheus(url).instant(query, time.time())


def _by_pod(url: str, node: str) -> dict[str, float]:
    found = _series(url, f'{m.GPU_UTIL}{{node="{node}",pod!=""}}')
    return {lb["pod"]: v for lb, v in found}


def _devices(url: str, node: str) -> list[float]:
    return sorted(v for _, v in _series(url, f'{m.GPU_UTIL}{{node="{node}",pod=""}}'))


def test_per_process_gives_each_pod_its_own_share_beside_the_gpus_series(
    scraped: tuple[Cluster, str],
) -> None:
    _, url = scraped
    assert _by_pod(url, "w-per-process") == {"busy-0": 90, "idle-0": 0}
    assert _devices(url, "w-per-process") == [0, 0, 90]  # held idle, free, held busy
    assert _by_pod(url, "s-per-process") == {"sbusy-0": 90, "sidle-0": 0}
    assert _devices(url, "s-per-process") == [90]


def test_unmapped_zero_reads_zero_for_every_pod_of_a_busy_gpu(scraped: tuple[Cluster, str]) -> None:
    _, url = scraped
    assert _by_pod(url, "w-unmapped-zero") == {"busy-0": 0, "idle-0": 0}
    assert _devices(url, "w-unmapped-zero") == [0, 0, 90]
    assert _by_pod(url, "s-unmapped-zero") == {"sbusy-0": 0, "sidle-0": 0}
    (busy_gpu,) = _series(
        url, m.degenerate_gpus() + ' and on (UUID) DCGM_FI_DEV_GPU_UTIL{node="w-unmapped-zero"}'
    )
    assert busy_gpu[1] == 90


def test_device_copy_drops_the_free_gpu_and_copies_the_gpus_value_to_each_sharer(
    scraped: tuple[Cluster, str],
) -> None:
    _, url = scraped
    assert _by_pod(url, "w-device-copy") == {"busy-0": 90, "idle-0": 0}
    assert _devices(url, "w-device-copy") == []  # no pod-less series: the free GPU is gone too
    gpus = _series(url, f'count by (node) (count by (node, UUID) ({m.GPU_TEMP}{{node="w-device-copy"}}))')
    assert gpus[0][1] == 2  # of 3: what GpuMissingFromDcgm counts (R4)
    assert _by_pod(url, "s-device-copy") == {"sbusy-0": 90, "sidle-0": 90}


def test_one_pod_keeps_free_gpus_and_gives_a_shared_gpu_to_one_pod(scraped: tuple[Cluster, str]) -> None:
    _, url = scraped
    assert _by_pod(url, "w-one-pod") == {"busy-0": 90, "idle-0": 0}
    assert _devices(url, "w-one-pod") == [0]  # the free GPU
    gpus = _series(url, f'count by (node) (count by (node, UUID) ({m.GPU_TEMP}{{node="w-one-pod"}}))')
    assert gpus[0][1] == 3
    assert _by_pod(url, "s-one-pod") == {"sidle-0": 90}  # the later pod, with the GPU's whole value


def _stack(tmp_path: Path) -> str:
    teams = [
        {"name": str(mp), "quotas": {"h100": 4},
         "reclaimIdle": {"after": f"{AFTER_S}s", "grace": "1m", "minAge": "1m"}}
        for mp in DEPLOYMENTS
    ]  # fmt: skip
    config = {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {
            "name": "r",
            "monitoring": {"prometheus": "install", "scrapeInterval": "2s", "reclaimIdle": True},
        },
        "gpufleet:nodePools": [{"name": "h100", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 2}],
        "gpufleet:teams": teams,
    }
    path = tmp_path / "Pulumi.reclaim-exporters.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return str(path)


def test_reclaim_never_deactivates_a_busy_job_under_any_exporter_and_still_reclaims_an_idle_one(
    scraped: tuple[Cluster, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, url = scraped
    ctx = cluster.kubectl()
    tasks.reclaim(ctx, stack=_stack(tmp_path), prometheus=url, apply=True, json=True)
    report = json.loads(capsys.readouterr().out)
    got = {(d["namespace"], d["workload"].removeprefix("job-")): d for d in report["decisions"]}
    for mapping, jobs in EXPECTED.items():
        for job, action in jobs.items():
            decision = got.get((str(mapping), job))
            assert (decision or {}).get("action") == action, (mapping, job, decision)
    deactivated = set()
    for call in ctx.run.call_args_list:
        command = call.args[0]
        if command.startswith("kubectl patch") and '"active": false' in command:
            deactivated.add((command.split(" -n ")[1].split()[0], command.split()[3].removeprefix("job-")))
    assert deactivated == {
        (str(mp), j) for mp, jobs in EXPECTED.items() for j, a in jobs.items() if a == "deactivate"
    }
    assert not {job for _, job in deactivated} & {"busy", "sbusy"}
    refusals = {k: d["reason"] for k, d in got.items() if d["action"] == "refuse"}
    assert "was 90% busy while every pod holding it read exactly 0" in refusals[("unmapped-zero", "busy")]
    assert "pod sbusy-0 holds a GPU but has no DCGM_FI_DEV_GPU_UTIL series" in refusals[("one-pod", "sbusy")]
    assert report["counts"]["deactivate"] == 5 and report["applied"] is True
