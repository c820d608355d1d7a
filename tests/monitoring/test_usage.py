"""`invoke usage` against a real Prometheus server (the toolchain's v3.14.0) on loopback, its TSDB filled with
`promtool tsdb create-blocks-from openmetrics` from series whose answers are known. Kueue's gauges come from
both replicas (`replica_role` leader and follower, as Kueue v0.19.2 exports them) and kube-state-metrics' node
labels twice (a rollout):

two teams on two pools over a 2h window ending at T (1-minute samples):
- alpha: 8 H100 GPUs allocated (Kueue) all window, quota 8; six of its GPUs at 75% utilisation, two idle (0%);
  10 admissions that waited 320-640 s;
- beta: 4 H100 GPUs allocated (quota 8) at 50%; 2 L40S GPUs (quota 4) allocated for the last hour only, idle;
  2 admissions that waited 5-10 s and 2 that waited 40-80 s;
- four unallocated H100 GPUs at 0% (no pod labels): never counted;
- gamma: 7 MIG 1g.10gb slices of one H100 (pool `mig`), five at 70% graphics-engine activity and two idle
  (DCGM_FI_PROF_GR_ENGINE_ACTIVE, the MIG field; no GPU_UTIL), and 4 time-sliced replicas of one L40S (pool
  `ts`) held by four pods, the GPU at 80%: an aws stack's dcgm-exporter (4.5.2-4.8.1, one pod per GPU,
  `infra.monitoring.exporter`) writes that 80% on one of them (`g-t3`, the last) and none on the others;
  quota 7 slices and 4 replicas;
- Kueue Workloads (kube-state-metrics' CustomResourceState): alpha has one created 90 minutes before T still
  without QuotaReserved, and one admitted.
Prices: p5.48xlarge 55.04 USD/h / 8 GPUs = 6.88 per GPU-hour; g6e.xlarge 1.861 (infra.catalog).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra.monitoring import metrics as m
from tests.conftest import ROOT
from tests.monitoring.conftest import run_promtool

T = 1767225600  # 2026-01-01T00:00:00Z, the end of the window
START = T - 3 * 3600
STEP = 60
GPU = "nvidia.com/gpu"

STACK = {
    "config": {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {
            "name": "usage-test",
            "monitoring": {"prometheus": "install", "scrapeInterval": f"{STEP}s"},
        },
        "gpufleet:nodePools": [
            {"name": "h100", "instanceType": "p5.48xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 2},
            {"name": "l40s", "instanceType": "g6e.xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 4},
            {
                "name": "mig",
                "instanceType": "p5.48xlarge",
                "minSize": 0,
                "desiredSize": 0,
                "maxSize": 1,
                "sharing": {"mig": "1g.10gb"},
            },
            {
                "name": "ts",
                "instanceType": "g6e.xlarge",
                "minSize": 0,
                "desiredSize": 0,
                "maxSize": 1,
                "sharing": {"timeSlicing": {"replicas": 4}},
            },
        ],
        "gpufleet:teams": [
            {"name": "alpha", "namespace": "team-alpha", "quotas": {"h100": 8}},
            {"name": "beta", "namespace": "team-beta", "quotas": {"h100": 8, "l40s": 4}},
            {"name": "gamma", "namespace": "team-gamma", "quotas": {"mig": 1, "ts": 1}},
        ],
    }
}


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _gauge(name: str, labels: dict[str, str], value, since: int = START) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        f"{name}{_labels(**labels)} {value(t) if callable(value) else value} {t}"
        for t in range(since, T + 1, STEP)
    ]


def _kueue(name: str, labels: dict[str, str], value, since: int = START) -> list[str]:  # type: ignore[no-untyped-def]
    """Both Kueue replicas report every gauge; the follower's copy must count nothing."""
    return [
        line
        for role in ("leader", "follower")
        for line in _gauge(name, {**labels, "replica_role": role}, value, since)
    ]


def openmetrics() -> str:
    lines: list[str] = []
    lines.append(f"# TYPE {m.KUEUE_USAGE} gauge")
    q = {"cohort": "gpufleet", "resource": GPU}
    lines += _kueue(m.KUEUE_USAGE, {**q, "cluster_queue": "alpha", "flavor": "h100"}, 8)
    lines += _kueue(m.KUEUE_USAGE, {**q, "cluster_queue": "beta", "flavor": "h100"}, 4)
    lines += _kueue(
        m.KUEUE_USAGE, {**q, "cluster_queue": "beta", "flavor": "l40s"}, lambda t: 2 if t > T - 3600 else 0
    )
    mig = {
        "cohort": "gpufleet",
        "cluster_queue": "gamma",
        "flavor": "mig",
        "resource": "nvidia.com/mig-1g.10gb",
    }
    shared = {
        "cohort": "gpufleet",
        "cluster_queue": "gamma",
        "flavor": "ts",
        "resource": "nvidia.com/gpu.shared",
    }
    lines += _kueue(m.KUEUE_USAGE, mig, 7)
    lines += _kueue(m.KUEUE_USAGE, shared, 4)
    lines.append(f"# TYPE {m.KUEUE_NOMINAL} gauge")
    lines += _kueue(m.KUEUE_NOMINAL, {**q, "cluster_queue": "alpha", "flavor": "h100"}, 8)
    lines += _kueue(m.KUEUE_NOMINAL, {**q, "cluster_queue": "beta", "flavor": "h100"}, 8)
    lines += _kueue(m.KUEUE_NOMINAL, {**q, "cluster_queue": "beta", "flavor": "l40s"}, 4)
    lines += _kueue(m.KUEUE_NOMINAL, mig, 7)
    lines += _kueue(m.KUEUE_NOMINAL, shared, 4)
    lines.append(f"# TYPE {m.GPU_UTIL} gauge")
    for i in range(8):
        gpu = {"gpu": str(i), "UUID": f"GPU-h1-{i}", "Hostname": "h1", "node": "h1"}
        lines += _gauge(m.GPU_UTIL, {**gpu, "namespace": "team-alpha", "pod": f"a-{i}"}, 75 if i < 6 else 0)
    for i in range(8):
        gpu = {"gpu": str(i), "UUID": f"GPU-h2-{i}", "Hostname": "h2", "node": "h2"}
        if i < 4:
            lines += _gauge(m.GPU_UTIL, {**gpu, "namespace": "team-beta", "pod": f"b-{i}"}, 50)
        else:
            lines += _gauge(m.GPU_UTIL, gpu, 0)
    for i in range(2):
        gpu = {"gpu": "0", "UUID": f"GPU-l{i}", "Hostname": f"l{i}", "node": f"l{i}"}
        lines += _gauge(m.GPU_UTIL, {**gpu, "namespace": "team-beta", "pod": f"nb-{i}"}, 0, since=T - 3540)
    shared_gpu = {"gpu": "0", "UUID": "GPU-t1-0", "Hostname": "t1", "node": "t1"}
    lines += _gauge(m.GPU_UTIL, {**shared_gpu, "namespace": "team-gamma", "pod": "g-t3"}, 80)
    lines.append(f"# TYPE {m.GR_ENGINE_ACTIVE} gauge")
    for i in range(7):
        instance = {"gpu": "0", "UUID": "GPU-m1-0", "GPU_I_ID": str(i), "Hostname": "m1", "node": "m1"}
        lines += _gauge(
            m.GR_ENGINE_ACTIVE, {**instance, "namespace": "team-gamma", "pod": f"g-m{i}"}, 0.7 if i < 5 else 0
        )
    lines.append(f"# TYPE {m.NODE_LABELS} gauge")
    # a1: a node of a pool only test_a_pool_without_dcgm_series_is_unknown_not_zero's stack has; no DCGM series.
    nodes = (
        ("h1", "h100"),
        ("h2", "h100"),
        ("l0", "l40s"),
        ("l1", "l40s"),
        ("m1", "mig"),
        ("t1", "ts"),
        ("a1", "a10g"),
    )
    for node, pool in nodes:
        for instance in ("ksm-a", "ksm-b"):
            lines += _gauge(m.NODE_LABELS, {"node": node, m.POOL_LABEL_METRIC: pool, "instance": instance}, 1)
    lines.append("# TYPE up gauge")
    lines += _gauge("up", {"job": m.KSM_JOB, "instance": "ksm-a"}, 1)
    lines.append(f"# TYPE {m.WORKLOAD_CREATED} gauge")
    for name, created in (("big", T - 5400), ("done", T - 7000)):
        lines += _gauge(
            m.WORKLOAD_CREATED, {"namespace": "team-alpha", "workload": name, "queue": "alpha"}, created
        )
    lines.append(f"# TYPE {m.WORKLOAD_CONDITION} gauge")
    for name, reserved in (("big", 0), ("done", 1)):
        cond = {"namespace": "team-alpha", "workload": name, "queue": "alpha", "type": "QuotaReserved"}
        lines += _gauge(m.WORKLOAD_CONDITION, cond, reserved)
    # The idle alert Prometheus' rule engine keeps as ALERTS series, for `invoke reclaim` (test_reclaim.py):
    # alpha's two idle GPUs (pods a-6, a-7) and beta's idle L40S pods, firing for the last 30 minutes.
    lines.append("# TYPE ALERTS gauge")
    for ns, team, pod in (
        ("team-alpha", "alpha", "a-6"),
        ("team-alpha", "alpha", "a-7"),
        ("team-beta", "beta", "nb-0"),
        ("team-beta", "beta", "nb-1"),
    ):
        firing = {"alertname": "GpuAllocatedIdle", "alertstate": "firing", "severity": "warning"}
        lines += _gauge("ALERTS", {**firing, "namespace": ns, "pod": pod, "team": team}, 1, since=T - 1800)
    lines.append(f"# TYPE {m.KUEUE_ADMISSION_WAIT} histogram")
    observed = {"alpha": {640.0: 10}, "beta": {10.0: 2, 80.0: 2}}
    for team, counts in observed.items():
        for t in range(START, T + 1, STEP):
            done = t >= T - 90 * 60  # every admission happened 90 minutes before T, inside the window
            total = 0
            for bound in (*m.KUEUE_WAIT_BUCKETS, float("inf")):
                total += counts.get(bound, 0) if done else 0
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(
                    f"{m.KUEUE_ADMISSION_WAIT}_bucket{_labels(cluster_queue=team, le=le)} {total} {t}"
                )
            lines.append(f"{m.KUEUE_ADMISSION_WAIT}_count{_labels(cluster_queue=team)} {total} {t}")
            lines.append(f"{m.KUEUE_ADMISSION_WAIT}_sum{_labels(cluster_queue=team)} {total * 100} {t}")
    return "\n".join(lines) + "\n# EOF\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def prometheus_url(
    promtool: str, prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh server with its own data dir on a free loopback port (never the packaged service's 9090)."""
    root = tmp_path_factory.mktemp("prometheus")
    (root / "series.om").write_text(openmetrics())
    data = root / "data"
    made = run_promtool(
        promtool, "tsdb", "create-blocks-from", "openmetrics", str(root / "series.om"), str(data)
    )
    assert made.returncode == 0, made.stdout + made.stderr
    (root / "prometheus.yml").write_text("global: {}\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (root / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, (root / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def stack_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stack") / "Pulumi.usage-test.yaml"
    path.write_text(yaml.safe_dump(STACK))
    return path


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=180
    )


def usage(url: str, stack: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return invoke(
        "usage",
        "--stack",
        str(stack),
        "--since",
        "2h",
        "--until",
        str(T),
        "--prometheus",
        url,
        "--out",
        str(out),
        *extra,
    )


def test_every_number_of_the_report(prometheus_url: str, stack_file: Path, tmp_path: Path) -> None:
    result = usage(prometheus_url, stack_file, tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["start"], report["end"]) == ("2025-12-31T22:00:00+00:00", "2026-01-01T00:00:00+00:00")
    teams = {r["name"]: r for r in report["teams"]}
    pools = {r["name"]: r for r in report["pools"]}
    approx = pytest.approx
    # alpha: 8 GPUs x 2h; used 6 x 0.75 x 2h; idle 2 x 2h; 16 x 6.88 USD; quota 8 x 2h.
    assert teams["alpha"] == {
        "name": "alpha",
        "allocated_gpu_hours": approx(16.0),
        "used_gpu_hours": approx(9.0),
        "idle_gpu_hours": approx(4.0),
        "cost_usd": approx(110.08),
        "quota_gpu_hours": approx(16.0),
        "quota_utilisation": approx(1.0),
        "queue_wait_p50_seconds": approx(480.0),  # 320 + 320 x 0.5 (all 10 in the 320-640 bucket)
        "queue_wait_p95_seconds": approx(624.0),  # 320 + 320 x 0.95
    }
    # beta: 4 x 2h + 2 x 1h; used 4 x 0.5 x 2h; idle the two L40S for 1h; 8 x 6.88 + 2 x 1.861 USD;
    # quota (8 + 4) x 2h.
    assert teams["beta"] == {
        "name": "beta",
        "allocated_gpu_hours": approx(10.0),
        "used_gpu_hours": approx(4.0),
        "idle_gpu_hours": approx(2.0),
        "cost_usd": approx(58.762),
        "quota_gpu_hours": approx(24.0),
        "quota_utilisation": approx(10 / 24),
        "queue_wait_p50_seconds": approx(10.0),  # rank 2 of 4 ends the 5-10 s bucket
        "queue_wait_p95_seconds": approx(76.0),  # rank 3.8: 40 + 40 x (3.8 - 2) / 2
    }
    assert pools["h100"] == {
        "name": "h100",
        "allocated_gpu_hours": approx(24.0),
        "used_gpu_hours": approx(13.0),
        "idle_gpu_hours": approx(4.0),
        "cost_usd": approx(165.12),
        "quota_gpu_hours": approx(32.0),
        "quota_utilisation": approx(0.75),
        "queue_wait_p50_seconds": None,
        "queue_wait_p95_seconds": None,
    }
    assert pools["l40s"]["allocated_gpu_hours"] == approx(2.0)
    assert pools["l40s"]["used_gpu_hours"] == approx(0.0)
    assert pools["l40s"]["idle_gpu_hours"] == approx(2.0)
    assert pools["l40s"]["cost_usd"] == approx(3.722)
    assert pools["l40s"]["quota_utilisation"] == approx(0.25)
    # gamma: 7 slices x 1/7 x 2h + 4 replicas x 1/4 x 2h allocated; used 5 x 0.7 x 1/7 x 2h (MIG) + 0.8 x 2h
    # (the shared GPU's whole value, once: not weighted by 1/replicas); idle 2 x 1/7 x 2h, none on the shared
    # GPU (its one series is busy); 2 x 6.88 + 2 x 1.861 USD.
    assert teams["gamma"] == {
        "name": "gamma",
        "allocated_gpu_hours": approx(4.0),
        "used_gpu_hours": approx(2.6),
        "idle_gpu_hours": approx(4 / 7),
        "cost_usd": approx(17.482),
        "quota_gpu_hours": approx(4.0),
        "quota_utilisation": approx(1.0),
        "queue_wait_p50_seconds": None,
        "queue_wait_p95_seconds": None,
    }
    assert (pools["mig"]["used_gpu_hours"], pools["mig"]["idle_gpu_hours"]) == (approx(1.0), approx(4 / 7))
    assert (pools["ts"]["used_gpu_hours"], pools["ts"]["idle_gpu_hours"]) == (approx(1.6), approx(0.0))
    assert report["notes"] == [
        "time-sliced pool(s) ts: dcgm-exporter 4.5.2-4.8.1 here carries each shared GPU's utilisation on one of "
        "its pods (one-pod), so the pool's used GPU-hours are right but their split between teams follows that "
        "pod, and idle GPU-hours count only its replica (a lower bound)",
        "queue waits cover admitted workloads only; still pending at the window's end: alpha 1 (oldest waited 90m)",
    ]
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "allocated-over-time.png",
        "gpu-hours-pools.png",
        "gpu-hours-teams.png",
    ]


def test_the_table_prints_the_same_numbers(prometheus_url: str, stack_file: Path, tmp_path: Path) -> None:
    result = usage(prometheus_url, stack_file, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if line.count("│") > 5}
    cells = {name: [c.strip() for c in line.split("│")[2:-1]] for name, line in lines.items()}
    assert cells["alpha"] == ["16.0", "9.0", "4.0", "110.08", "16.0", "100%", "8.0m", "10.4m"]
    assert cells["beta"] == ["10.0", "4.0", "2.0", "58.76", "24.0", "42%", "10s", "76s"]
    assert cells["h100"] == ["24.0", "13.0", "4.0", "165.12", "32.0", "75%", "-", "-"]
    assert cells["l40s"] == ["2.0", "0.0", "2.0", "3.72", "8.0", "25%", "-", "-"]
    assert cells["gamma"] == ["4.0", "2.6", "0.6", "17.48", "4.0", "100%", "-", "-"]
    assert "note: queue waits cover admitted workloads only" in result.stdout


def test_csv_and_price_file(prometheus_url: str, stack_file: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100: 2.5\n")
    result = usage(prometheus_url, stack_file, tmp_path, "--csv", "--price-file", str(prices))
    assert result.returncode == 0, result.stderr
    rows = {line.split(",")[1]: line.split(",") for line in result.stdout.splitlines()[1:]}
    assert float(rows["alpha"][5]) == pytest.approx(40.0)  # 16 GPU-h x 2.5 (the file wins over the catalog)
    assert float(rows["beta"][5]) == pytest.approx(8 * 2.5 + 2 * 1.861)


def test_a_missing_metric_becomes_a_note(prometheus_url: str, tmp_path: Path) -> None:
    """A window before any data: no Kueue, no DCGM series -> notes naming the metrics, no invented numbers."""
    stack = tmp_path / "Pulumi.usage-test.yaml"
    stack.write_text(yaml.safe_dump(STACK))
    result = invoke(
        "usage",
        "--stack",
        str(stack),
        "--since",
        "1h",
        "--until",
        str(START - 7200),
        "--prometheus",
        prometheus_url,
        "--out",
        str(tmp_path),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    notes = " ".join(report["notes"])
    for metric in (m.KUEUE_USAGE, m.KUEUE_NOMINAL, m.GPU_UTIL, m.KUEUE_ADMISSION_WAIT, m.WORKLOAD_CREATED):
        assert metric in notes
    assert all(r["allocated_gpu_hours"] is None and r["cost_usd"] is None for r in report["teams"])
    assert all(r["used_gpu_hours"] is None for r in report["teams"] + report["pools"])
    # no empty charts that read as "zero hours": nothing is drawn, and stderr says why
    assert not list(tmp_path.glob("*.png"))
    assert "no plots" in result.stderr


def test_a_window_longer_than_the_data_says_so(prometheus_url: str, stack_file: Path, tmp_path: Path) -> None:
    """The TSDB starts 3h before T: a 4h window is cut, and the report says from when it has data."""
    result = invoke(
        "usage", "--stack", str(stack_file), "--since", "4h", "--until", str(T), "--prometheus", prometheus_url,
        "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (note,) = [n for n in json.loads(result.stdout)["notes"] if "samples only from" in n]
    assert "2025-12-31 21:00 UTC" in note


def test_a_pool_without_dcgm_series_is_unknown_not_zero(prometheus_url: str, tmp_path: Path) -> None:
    """A pool whose nodes report no DCGM series at all (a labelled node, no exporter) shows no number, and a
    note names it; the other pools keep theirs."""
    stack = tmp_path / "Pulumi.usage-test.yaml"
    config = yaml.safe_load(yaml.safe_dump(STACK))
    config["config"]["gpufleet:nodePools"].append(
        {"name": "a10g", "instanceType": "g5.2xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 1}
    )
    stack.write_text(yaml.safe_dump(config))
    result = usage(prometheus_url, stack, tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    pools = {r["name"]: r for r in report["pools"]}
    assert pools["a10g"]["used_gpu_hours"] is None and pools["a10g"]["idle_gpu_hours"] is None
    assert pools["h100"]["used_gpu_hours"] == pytest.approx(13.0)
    assert f"no DCGM series for pool(s) a10g ({m.GPU_UTIL})" in " ".join(report["notes"])


def test_unreachable_prometheus_exits_3(stack_file: Path, tmp_path: Path) -> None:
    result = usage(f"http://127.0.0.1:{_free_port()}", stack_file, tmp_path)
    assert result.returncode == 3
    assert "cannot reach Prometheus" in result.stderr and "Traceback" not in result.stderr


def test_bad_window_exits_2(stack_file: Path, tmp_path: Path) -> None:
    result = invoke("usage", "--stack", str(stack_file), "--since", "a week", "--out", str(tmp_path))
    assert result.returncode == 2 and "--since" in result.stderr


def test_a_stack_without_prometheus_asks_for_one_instead_of_pointing_at_a_service_it_never_created(
    tmp_path: Path,
) -> None:
    """`dev` deploys no Prometheus (monitoring.prometheus: none): the report needs --prometheus, not a
    port-forward of kube-prometheus-stack, which is not there."""
    result = invoke("usage", "--stack", "dev", "--out", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        "error: stack 'dev' has no Prometheus (gpufleet:cluster.monitoring.prometheus: none): pass --prometheus "
        "URL of one that scrapes its cluster, or set monitoring.prometheus to install or existing "
        "(docs/operations.md)"
    )
    given = invoke("usage", "--stack", "dev", "--prometheus", f"http://127.0.0.1:{_free_port()}")
    assert given.returncode == 3 and "cannot reach Prometheus" in given.stderr
