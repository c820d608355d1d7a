"""Operations on real components (docs/operations.md): the stack's metrics scraped as the Prometheus operator
scrapes them in a cluster, `invoke usage` checked against what the twin ran, alerts driven by real conditions.

One twin with `--monitoring` (twin.monitoring): the real Prometheus operator v0.93.1 turns the stack's
ServiceMonitors and PrometheusRule, the GPU operator's dcgm-exporter monitor (built from the stack's
`dcgmExporter.serviceMonitor` values) and the charts' monitors into Prometheus 3.14's configuration; Prometheus
discovers targets through the API server's Endpoints and scrapes both Kueue replicas, kube-state-metrics 2.20
and one dcgm-exporter stand-in per GPU node, each at its pod's IP. The tests set what workloads do (their GPUs'
utilisation, their durations, node faults) and never a series or a label.

"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.stackfile import load_stack
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube, job, name
from twin.launch import RunningTwin

SCRAPE_S = 5
UTIL = "gpufleet.io/twin-gpu-util"
DURATION = "gpufleet.io/twin-duration"
ON_BINPACK = {"schedulerName": "gpu-binpack"}
PRICES = {"h100": 4.0, "l40s": 1.5, "a100": 2.0}
RECLAIM_AFTER_S = 30


def monitoring_stack(folder: Path) -> Path:
    """The metal stack with a Prometheus and three kinds of GPU: whole H100s, time-sliced L40S (2 replicas) and
    MIG A100s (1g.10gb, 7 per GPU), two teams; short scrape and alert windows so the test sees them pass."""
    doc = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    c = doc["config"]
    c["gpufleet:cluster"]["monitoring"] = {
        "prometheus": "install",
        "scrapeInterval": f"{SCRAPE_S}s",
        "idleAfter": "1m",
        "pendingAfter": "1m",
        "storage": {"size": "20Gi"},
        "retentionSize": "15GB",
        "alertmanager": {
            "receivers": [
                {
                    "name": "oncall-mail",
                    "email": {
                        "to": "oncall@example.com",
                        "fromAddress": "gpufleet@example.com",
                        "smarthost": "127.0.0.1:2525",
                        "requireTls": False,
                    },
                }
            ],
            "routes": {"critical": "oncall-mail"},
        },
    }
    c["gpufleet:nodePools"] = [
        {"name": "h100", "hosts": ["gpu-h100-01", "gpu-h100-02"], "gpuModel": "H100", "gpusPerNode": 8,
         "cpusPerNode": 192, "memoryGiBPerNode": 2048},
        {"name": "l40s", "hosts": ["gpu-l40s-01"], "gpuModel": "L40S", "gpusPerNode": 4, "cpusPerNode": 64,
         "memoryGiBPerNode": 512, "sharing": {"timeSlicing": {"replicas": 2}}},
        {"name": "a100", "hosts": ["gpu-a100-01"], "gpuModel": "A100-80GB", "gpusPerNode": 2, "cpusPerNode": 64,
         "memoryGiBPerNode": 512, "sharing": {"mig": "1g.10gb"}},
    ]  # fmt: skip
    c["gpufleet:cluster"]["monitoring"]["reclaimIdle"] = True
    c["gpufleet:teams"] = [
        {
            "name": "vision",
            "quotas": {"h100": 8, "l40s": 2, "a100": 1},
            "borrowingLimit": 8,
            "reclaimIdle": {"after": f"{RECLAIM_AFTER_S}s", "grace": "1m", "minAge": f"{RECLAIM_AFTER_S}s"},
        },
        {"name": "nlp", "quotas": {"h100": 8, "l40s": 2, "a100": 1}, "borrowingLimit": 8},
    ]
    path = folder / "Pulumi.twin-monitoring.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    load_stack(path)  # a valid stack, or the test's own setup is wrong
    return path


class Chain:
    """The running twin and how to ask its Prometheus and Alertmanager."""

    def __init__(self, twin: RunningTwin, kube: Kube, stack: Path) -> None:
        self.twin, self.kube, self.stack = twin, kube, stack
        self.prometheus = str(twin.info["prometheus"])
        self.alertmanager = str(twin.info["alertmanager"])
        self.started = time.time()

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=20) as r:
            return list(json.load(r)["data"]["result"])

    def scraped_past(self, moment: float) -> bool:
        """Whether Prometheus holds a sample taken after `moment` of both series a usage report reads (the GPU
        exporters' and Kueue's), so a window ending then is complete in its storage."""
        series = ("DCGM_FI_DEV_GPU_UTIL", "kueue_cluster_queue_resource_usage")
        latest = [self.query(f"max(timestamp({s}))") for s in series]
        return all(rows and float(rows[0]["value"][1]) > moment for rows in latest)

    def alerts(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.prometheus}/api/v1/alerts", timeout=20) as r:
            return list(json.load(r)["data"]["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.prometheus}/api/v1/targets?state=active", timeout=20) as r:
            return list(json.load(r)["data"]["activeTargets"])

    def submit(self, obj: dict[str, Any]) -> None:
        done = self.kube.create(obj)
        assert done.ok, done.err

    def annotate_node(self, node: str, key: str, value: str) -> None:
        self.kube.ok("annotate", "node", node, f"{key}={value}", "--overwrite")


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    stack = monitoring_stack(tmp_path_factory.mktemp("monitoring-stack"))
    twin = start_twin(tmp_path_factory, stack, monitoring=True, frameworks=True)  # as its windows were set
    try:
        c = Chain(twin, Kube.of(twin), stack)
        jobs = {
            "nvidia-dcgm-exporter": 4,
            "kueue-controller-manager-metrics-service": 2,
            "kube-state-metrics": 1,
        }

        def all_up() -> bool:
            up: dict[str, int] = {}
            for t in c.targets():
                if t["health"] == "up":
                    up[t["labels"]["job"]] = up.get(t["labels"]["job"], 0) + 1
            return all(up.get(j, 0) >= n for j, n in jobs.items())

        eventually(all_up, "every scrape target up", timeout=120, every=2)
        yield c
    finally:
        twin.stop()


def gpu_job(
    team: str, job_name: str, requests: dict[str, int], util: int, seconds: int = 0
) -> dict[str, Any]:
    annotations = {UTIL: str(util), **({DURATION: str(seconds)} if seconds else {})}
    return job(job_name, team, requests, queue="default", pod=dict(ON_BINPACK), annotations=annotations)


# ---- the chain itself ---------------------------------------------------------------------------------


def test_operator_generated_the_scrape_configuration_for_prometheus_3(chain: Chain) -> None:
    """Every target comes from a ServiceMonitor the operator turned into a scrape job (its `serviceMonitor/<ns>/
    <name>/<endpoint>` job names, prometheus-operator v0.93 promcfg.go), at the pods' IPs from Endpoints."""
    pools = {t["scrapePool"] for t in chain.targets()}
    assert "serviceMonitor/gpu-operator/nvidia-dcgm-exporter/0" in pools
    assert "serviceMonitor/kueue-system/gpufleet-kueue/0" in pools
    assert any(p.startswith("serviceMonitor/monitoring/") and "kube-state-metrics" in p for p in pools)
    build = json.load(urllib.request.urlopen(f"{chain.prometheus}/api/v1/status/buildinfo", timeout=10))
    assert build["data"]["version"] == "3.14.0"  # the chart's Prometheus, not Debian's 2.42


def test_prometheus_keeps_history_on_a_volume_with_the_specs_size_and_retention(chain: Chain) -> None:
    """The operator's StatefulSet gets a volumeClaimTemplate of `monitoring.storage.size` and Prometheus runs
    with the spec's `retention` and `retentionSize` (prometheus-operator: storage.volumeClaimTemplate,
    retention, retentionSize), so a restart keeps the usage history."""
    claims = chain.kube.items("pvc", "monitoring")
    sizes = {c["metadata"]["name"]: c["spec"]["resources"]["requests"]["storage"] for c in claims}
    assert any(n.startswith("prometheus-") and s == "20Gi" for n, s in sizes.items()), sizes
    # what the running Prometheus says it keeps (the operator passes retention by flag or, for Prometheus 3.x,
    # in the generated configuration's storage section; either way the server reports the effective limits)
    info = json.load(urllib.request.urlopen(f"{chain.prometheus}/api/v1/status/runtimeinfo", timeout=10))
    retention = info["data"]["storageRetention"]
    assert "15d" in retention and ("15GB" in retention or "15GiB" in retention), retention


def test_gpu_series_carry_the_pod_that_holds_the_gpu_and_free_gpus_none(chain: Chain) -> None:
    """Scraped through the GPU operator's ServiceMonitor (honorLabels false), dcgm-exporter's own
    `namespace`/`pod`/`container` labels would land in `exported_*` and every free GPU would carry the exporter
    pod's name; the stack's relabelling keeps the exporter's pod mapping and leaves free GPUs unlabelled. This
    stack has a time-sliced pool on an existing cluster, so its exporter runs per-process values
    (infra.monitoring.exporter): every GPU keeps its own pod-less series, a held one next to its pod's."""
    n = name("mapped")
    chain.submit(gpu_job("vision", n, {"nvidia.com/gpu": 2}, util=70))
    series = eventually(
        lambda: chain.query(f'DCGM_FI_DEV_GPU_UTIL{{namespace="vision",pod=~"{n}-.*"}}'),
        "the job's GPUs",
        90,
        2,
    )
    assert len(series) == 2 and {s["value"][1] for s in series} == {"70"}
    assert all(s["metric"]["container"] == "main" for s in series)
    assert not chain.query("count(DCGM_FI_DEV_GPU_UTIL{exported_pod!=''})")
    devices = chain.query('DCGM_FI_DEV_GPU_UTIL{Hostname=~"gpu-h100-.*",pod=""}')
    held = chain.query('DCGM_FI_DEV_GPU_UTIL{Hostname=~"gpu-h100-.*",pod!=""}')
    assert len({s["metric"]["UUID"] for s in devices}) == len(devices) == 16, len(devices)
    mine = {s["metric"]["UUID"] for s in series}
    assert {
        s["metric"]["UUID"]: s["value"][1] for s in devices if s["metric"]["UUID"] in mine
    } == dict.fromkeys(mine, "70")
    assert all(s["metric"].get("pod_uid") for s in series)  # per-process values carry the pod's UID
    assert not [s for s in held if s["metric"]["namespace"] == "gpu-operator"]
    chain.kube.ok("delete", "job", n, "-n", "vision", "--wait=false")


def test_both_kueue_replicas_export_gauges_and_the_reports_count_the_leader_once(chain: Chain) -> None:
    """Kueue v0.19.2's follower replica exports the cache gauges too (`replica_role`, pkg/metrics); summed
    without the role, quota and usage double. Both replicas are scraped here, and the query `invoke usage` reads
    quota with, and the recording rule the dashboards use, give the spec's 8 H100 per team."""
    from infra.monitoring.usage import QUERIES

    roles = chain.query("count by (replica_role) (kueue_cluster_queue_nominal_quota)")
    assert {r["metric"]["replica_role"] for r in roles} == {"leader", "follower"}
    quota = {
        (r["metric"]["cluster_queue"], r["metric"]["flavor"], r["metric"]["resource"]): float(r["value"][1])
        for r in chain.query(QUERIES["quota"])
    }
    for team in ("vision", "nlp"):
        assert quota[(team, "h100", "nvidia.com/gpu")] == 8, quota
        assert quota[(team, "l40s", "nvidia.com/gpu.shared")] == 4, quota
    whole = eventually(
        lambda: chain.query('sum by (cluster_queue) (gpufleet:kueue_quota:gpus{cluster_queue="vision"})'),
        "the whole-GPU recording rule",
        60,
        2,
    )
    assert float(whole[0]["value"][1]) == 11  # 8 H100 + 2 L40S (4 replicas) + 1 A100 (7 slices)


# ---- usage, end to end -------------------------------------------------------------------------------


def _when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _condition(obj: dict[str, Any], kind: str) -> float | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == kind and c["status"] == "True":
            return _when(c["lastTransitionTime"])
    return None


def test_usage_reports_what_the_twin_ran(chain: Chain, tmp_path: Path) -> None:
    """`invoke usage --prometheus URL` against the twin's Prometheus, compared with what the test computes from
    the API server's own record of the same workloads (admission and finish times of the Workloads, the
    utilisation each job was given): allocated, used and idle GPU-hours per team, cost and quota GPU-hours, each
    within a scrape interval per workload edge: GPU series mapped to pods (time-sliced ones too), one Kueue
    replica counted, MIG slices and replicas in whole GPUs, MIG use read from GR_ENGINE_ACTIVE."""
    seconds = 45
    runs = {  # team, requests, whole GPUs, utilisation
        name("busy"): ("vision", {"nvidia.com/gpu": 2}, 2.0, 90),
        name("share"): ("vision", {"nvidia.com/gpu.shared": 1}, 0.5, 40),
        name("idle"): ("nlp", {"nvidia.com/gpu": 1}, 1.0, 1),
        name("mig"): ("nlp", {"nvidia.com/mig-1g.10gb": 2}, 2 / 7, 50),
    }
    # The report's window starts once the earlier tests' GPUs are released (the pod-mapping test's job holds 2
    # of vision's H100 until its deletion lands), so the usage counted is these four jobs' only.
    window_s = 120

    def released() -> bool:
        rows = chain.query(
            'sum by (cluster_queue) (kueue_cluster_queue_resource_usage{resource=~"nvidia.com/.*"})'
        )
        return bool(rows) and all(float(r["value"][1]) == 0 for r in rows)

    eventually(released, "no GPU quota in use before the usage run", timeout=90, every=SCRAPE_S)
    window_start = time.time() + SCRAPE_S  # the next scrape sees the same zero
    eventually(
        lambda: chain.scraped_past(window_start), "a scrape after the window's start", timeout=60, every=1
    )
    for job_name, (team, requests, _, util) in runs.items():
        chain.submit(gpu_job(team, job_name, requests, util, seconds))

    def finished() -> list[dict[str, Any]] | None:
        done = []
        for team in ("vision", "nlp"):
            for w in chain.kube.items("workloads", team):
                owner = w["metadata"]["ownerReferences"][0]["name"]
                if owner in runs:
                    if _condition(w, "Finished") is None:
                        return None
                    done.append(w)
        return done if len(done) == len(runs) else None

    workloads = eventually(finished, "the four jobs to finish", timeout=seconds + 120, every=3)
    # the window's end and the jobs' last three scrapes (their GPUs read free again) are in Prometheus
    settled = max(time.time() + 2 * SCRAPE_S, window_start + window_s)
    eventually(lambda: chain.scraped_past(settled), "the scrapes past the usage window", timeout=window_s + 60,
               every=SCRAPE_S)  # fmt: skip
    expected = {
        t: {"allocated": 0.0, "used": 0.0, "idle": 0.0, "edges": 0.0, "cost": 0.0} for t in ("vision", "nlp")
    }
    pool_of = {"nvidia.com/gpu": "h100", "nvidia.com/gpu.shared": "l40s", "nvidia.com/mig-1g.10gb": "a100"}
    for w in workloads:
        job_name = w["metadata"]["ownerReferences"][0]["name"]
        team, requests, whole, util = runs[job_name]
        admitted, done = _condition(w, "QuotaReserved"), _condition(w, "Finished")
        assert admitted and done
        hours = (done - admitted) / 3600
        e = expected[team]
        e["allocated"] += whole * hours
        e["used"] += whole * util / 100 * hours
        e["idle"] += whole * hours if util < 5 else 0.0
        e["edges"] += whole * 2 * SCRAPE_S / 3600  # a scrape's worth of error at each end
        e["cost"] += whole * hours * PRICES[pool_of[next(iter(requests))]]
    prices = tmp_path / "prices.yaml"
    prices.write_text(yaml.safe_dump(PRICES))

    def usage(*window: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "invoke", "usage", "--stack", str(chain.stack), "--prometheus", chain.prometheus,
             *window, "--json", "--price-file", str(prices), "--out", str(tmp_path / "plots")],
            cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    report = usage("--since", f"{window_s // 60}m", "--until", str(window_start + window_s))
    teams = {r["name"]: r for r in report["teams"]}
    for team, e in expected.items():
        row = teams[team]
        tol = e["edges"] + 1e-4
        assert row["allocated_gpu_hours"] == pytest.approx(e["allocated"], abs=tol), (team, row, e)
        assert row["used_gpu_hours"] == pytest.approx(e["used"], abs=tol), (team, row, e)
        assert row["idle_gpu_hours"] == pytest.approx(e["idle"], abs=tol), (team, row, e)
        assert row["cost_usd"] == pytest.approx(e["cost"], abs=tol * max(PRICES.values())), (team, row, e)
        # quota: 8 H100 + 2 L40S + 1 A100 = 11 whole GPUs for every sample of the window
        assert row["quota_gpu_hours"] == pytest.approx(11 * window_s / 3600, rel=0.05), (team, row)
    # a window reaching back before Prometheus' first sample counts quota from that sample on, and says so
    report = usage("--since", "15m")
    covered_h = (time.time() - chain.started) / 3600
    for row in report["teams"]:
        if row["name"] in expected:
            assert row["quota_gpu_hours"] == pytest.approx(11 * covered_h, rel=0.25), row
    assert any("after the window's start" in n for n in report["notes"]), report["notes"]


# ---- reclaim on what the exporter really says -----------------------------------------------------------


def _exporter_shape(chain: Chain, token: bool, host_pid: bool) -> None:
    patch = {"spec": {"template": {"spec": {"automountServiceAccountToken": token, "hostPID": host_pid}}}}
    chain.kube.ok("patch", "daemonset", "nvidia-dcgm-exporter", "-n", "gpu-operator", "--type", "merge",
                  "-p", json.dumps(patch))  # fmt: skip


def test_reclaim_refuses_a_busy_job_the_exporter_cannot_map_and_still_reclaims_an_idle_one(
    chain: Chain, tmp_path: Path
) -> None:
    """R1 on real components: the GPU operator's exporter DaemonSet without the token and host PIDs the
    per-process values need (what it runs with KUBERNETES_VIRTUAL_GPUS and none of gpufleet's ClusterPolicy
    fields) reads 0 for every pod, the busy one too, beside its GPU's own busy series (twin.dcgm). `invoke
    reclaim --apply`, against the twin's Prometheus and API server, refuses the busy job with the reason and
    deactivates the idle one, which real Kueue then evicts."""
    from infra.monitoring.reclaim import WARNED, rfc3339

    _exporter_shape(chain, token=False, host_pid=False)
    busy, idle = name("rc-busy"), name("rc-idle")
    try:
        for job_name, util in ((busy, 90), (idle, 0)):
            chain.submit(gpu_job("vision", job_name, {"nvidia.com/gpu": 1}, util=util))

        both = f'DCGM_FI_DEV_GPU_UTIL{{namespace="vision",pod=~"({busy}|{idle})-.*"}}'

        def zero_on_a_busy_gpu() -> bool:
            window = chain.query(f"max by (pod) (max_over_time({both}[{RECLAIM_AFTER_S + 5}s] offset 1s))")
            started = chain.query(f"count by (pod) ({both} offset {RECLAIM_AFTER_S + 5}s)")
            return len(started) == 2 and len(window) == 2 and all(s["value"][1] == "0" for s in window)

        eventually(zero_on_a_busy_gpu, "the reclaim window of both jobs read as 0", timeout=180, every=3)
        workloads = {
            w["metadata"]["ownerReferences"][0]["name"]: w for w in chain.kube.items("workloads", "vision")
        }
        for job_name in (busy, idle):  # warned long ago: a run that trusts them idle deactivates them
            warned = json.dumps({"metadata": {"annotations": {WARNED: rfc3339(time.time() - 3600)}}})
            chain.kube.ok("patch", "workloads.kueue.x-k8s.io", workloads[job_name]["metadata"]["name"], "-n",
                          "vision", "--type", "merge", "-p", warned)  # fmt: skip
        doc = yaml.safe_load(chain.stack.read_text())
        doc["config"]["gpufleet:cluster"]["kubeconfig"] = str(chain.twin.kubeconfig)
        stack = tmp_path / "Pulumi.twin-reclaim.yaml"
        stack.write_text(yaml.safe_dump(doc, sort_keys=False))
        kubectl_dir = str(Path(chain.twin.info["kubectl"]).parent)
        done = subprocess.run(
            [sys.executable, "-m", "invoke", "reclaim", "--stack", str(stack), "--prometheus", chain.prometheus,
             "--apply", "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PATH": f"{kubectl_dir}:{os.environ['PATH']}"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        decisions = {d["workload"]: d for d in json.loads(done.stdout)["decisions"]}
        by_job = {
            job_name: decisions.get(workloads[job_name]["metadata"]["name"], {}) for job_name in (busy, idle)
        }
        assert by_job[busy].get("action") == "refuse", by_job
        assert "read exactly 0" in by_job[busy]["reason"], by_job
        assert by_job[idle].get("action") == "deactivate", by_job
        live = {
            w["metadata"]["ownerReferences"][0]["name"]: w for w in chain.kube.items("workloads", "vision")
        }
        assert live[busy]["spec"].get("active") is not False
        assert live[idle]["spec"].get("active") is False
    finally:
        _exporter_shape(chain, token=True, host_pid=True)
        for job_name in (busy, idle):
            chain.kube.ok("delete", "job", job_name, "-n", "vision", "--wait=false")


# ---- alerts ---------------------------------------------------------------------------------------------


def _alerts(chain: Chain) -> list[tuple[str, dict[str, str], str]]:
    """(alert name, labels, state) of every alert Prometheus holds."""
    return [(a["labels"]["alertname"], a["labels"], a["state"]) for a in chain.alerts()]


def _on(alerts: list[tuple[str, dict[str, str], str]], alert: str, label: str) -> set[str]:
    return {labels.get(label, "") for name_, labels, _ in alerts if name_ == alert}


def _exporter_view(chain: Chain) -> str:
    """What the DCGM alerts stand on: each exporter target's node and health, the GPUs each node reports."""
    targets = sorted(
        (t["labels"].get("node", "?"), t["labels"].get("instance", "?"), t["health"], t.get("lastError", ""))
        for t in chain.targets()
        if t["labels"].get("job") == "nvidia-dcgm-exporter"
    )
    gpus = {r["metric"].get("Hostname", "?"): r["value"][1]
            for r in chain.query("count by (Hostname) (DCGM_FI_DEV_GPU_UTIL)")}  # fmt: skip
    return f"exporter targets (node, instance, health, error): {targets}\nDCGM GPUs per node: {gpus}"


def test_alerts_fire_on_real_conditions_and_reach_alertmanager(chain: Chain) -> None:
    """Each condition made real on the twin, then observed in Prometheus' alert state:
    - an idle pod past its team's `idleAfter` (GpuAllocatedIdle), and a busy one that does not fire;
    - XID 79 on a GPU (GpuFallenOffBus: the windowed `DCGM_EXP_XID_ERRORS_COUNT`, not the sticky
      last-XID field), double-bit ECC (GpuDoubleBitEccError: the level, not an increase);
    - a GPU that stops reporting (GpuMissingFromDcgm: fewer DCGM GPUs than the node's capacity; `for: 10m`,
      so pending here);
    - an exporter answering errors (GpuMetricsTargetDown);
    - a large job starving behind small admissions (GpuWorkloadStarved: kube-state-metrics' Workload
      metrics, the age of a workload without QuotaReserved);
    - a node that stops heartbeating, so the node controller marks it NotReady (GpuNodeNotReady, `for: 5m`:
      pending).
    Critical alerts reach Alertmanager, routed to the spec's receiver: Alertmanager tries to deliver to it
    (its notification counter for the email integration moves)."""
    chain.submit(gpu_job("nlp", name("idle"), {"nvidia.com/gpu": 1}, util=0))
    busy = name("busy")
    chain.submit(gpu_job("vision", busy, {"nvidia.com/gpu": 8}, util=95))
    chain.annotate_node("gpu-h100-01", "gpufleet.io/twin-xid", "7:79")
    chain.annotate_node("gpu-h100-01", "gpufleet.io/twin-ecc-dbe", "6:2")
    chain.annotate_node("gpu-h100-02", "gpufleet.io/twin-gpu-lost", "7")
    chain.annotate_node("gpu-l40s-01", "gpufleet.io/twin-exporter", "down")
    # starvation: vision holds 8 H100 and nlp 1; a 12-GPU nlp job cannot fit while 1-GPU nlp jobs keep coming
    big = name("big")
    chain.submit(gpu_job("nlp", big, {"nvidia.com/gpu": 12}, util=90))
    # NotReady: kwok stops playing kubelet for a node that loses its label (--manage-nodes-with-label-selector)
    chain.kube.ok("label", "node", "gpu-a100-01", "type-")

    wanted = {
        "GpuAllocatedIdle": "firing",
        "GpuFallenOffBus": "firing",
        "GpuDoubleBitEccError": "firing",
        "GpuMissingFromDcgm": "pending",  # for: 10m
        "GpuMetricsTargetDown": "pending",  # for: 10m
        "GpuWorkloadStarved": "pending",  # for: 5m
        "GpuNodeNotReady": "pending",  # for: 5m
    }

    missing: list[str] = []

    def small_jobs_and_alerts() -> list[tuple[str, dict[str, str], str]] | None:
        chain.submit(gpu_job("nlp", name("small"), {"nvidia.com/gpu": 1}, util=50, seconds=20))
        alerts = _alerts(chain)
        seen = {(alert, state) for alert, _, state in alerts}
        # an alert wanted pending may already fire
        missing[:] = [f"{a} ({s})" for a, s in wanted.items()
                      if (a, s) not in seen and not (s == "pending" and (a, "firing") in seen)]  # fmt: skip
        return None if missing else alerts

    try:
        try:
            alerts = eventually(small_jobs_and_alerts, "every alert in its state", timeout=300, every=10)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}\nmissing: {missing}\n{_exporter_view(chain)}") from None
        idle_pods = _on(alerts, "GpuAllocatedIdle", "pod")
        assert idle_pods and not [p for p in idle_pods if p.startswith(busy)], idle_pods
        assert _on(alerts, "GpuFallenOffBus", "Hostname") == {"gpu-h100-01"}
        assert _on(alerts, "GpuDoubleBitEccError", "Hostname") == {"gpu-h100-01"}
        assert "gpu-h100-02" in _on(alerts, "GpuMissingFromDcgm", "node")
        assert _on(alerts, "GpuMetricsTargetDown", "node") == {"gpu-l40s-01"}
        assert _on(alerts, "GpuNodeNotReady", "node") == {"gpu-a100-01"}
        assert [w for w in _on(alerts, "GpuWorkloadStarved", "workload") if big in w], alerts

        def delivered() -> bool:
            with urllib.request.urlopen(f"{chain.alertmanager}/api/v2/alerts", timeout=10) as r:
                alerts = json.load(r)
            routed = {a["labels"]["alertname"]: [x["name"] for x in a["receivers"]] for a in alerts}
            with urllib.request.urlopen(f"{chain.alertmanager}/metrics", timeout=10) as r:
                text = r.read().decode()
            tried = [ln for ln in text.splitlines()
                     if ln.startswith("alertmanager_notifications_total") and 'integration="email"' in ln]  # fmt: skip
            return routed.get("GpuFallenOffBus") == ["oncall-mail"] and any(
                float(ln.split()[-1]) > 0 for ln in tried
            )

        eventually(delivered, "the critical alert routed to the spec's receiver", timeout=90, every=3)
    finally:
        chain.kube.ok("label", "node", "gpu-a100-01", "type=kwok", "--overwrite")
        for node, key in (("gpu-h100-01", "xid"), ("gpu-h100-01", "ecc-dbe"), ("gpu-h100-02", "gpu-lost"),
                          ("gpu-l40s-01", "exporter")):  # fmt: skip
            chain.kube.ok("annotate", "node", node, f"gpufleet.io/twin-{key}-")
