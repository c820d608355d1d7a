"""`invoke simulate` end to end: stack or node CSV in, table, report, plots and JSON out; bad traces exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra.simulate.stack import cluster_from_spec
from tests.conftest import ROOT, load_example

pytestmark = pytest.mark.xdist_group("build-metal")


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "simulate", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cluster_from_prod_stack_has_every_node_at_max_size() -> None:
    cluster = cluster_from_spec(load_example("example-prod"))
    # 4 + 1 p5.48xlarge (8 GPUs), 6 g6e.12xlarge (4), 16 g5.2xlarge (1)
    assert cluster.size == 27
    assert int(cluster.num_gpu.sum()) == 5 * 8 + 6 * 4 + 16
    p5 = cluster.names.index("h100-train-000")
    assert (cluster.cpu_milli[p5], cluster.memory_mib[p5], cluster.gpu_model[p5]) == (
        192_000,
        2048 * 1024,
        "H100",
    )


def test_cluster_from_metal_stack_uses_host_names() -> None:
    cluster = cluster_from_spec(load_example("metal"))
    assert "gpu-h100-01" in cluster.names and cluster.size == 7
    assert int(cluster.num_gpu.sum()) == 4 * 8 + 3 * 4


def _pods(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text("cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "\n".join(rows) + "\n")
    return path


def test_simulate_stack_writes_report_and_json(tmp_path: Path) -> None:
    pods = _pods(
        tmp_path, ["4000,16384,1,1000,", "2000,8192,1,500,", "1000,1024,0,0,", "8000,32768,4,1000,L40S"]
    )
    out = tmp_path / "runs.json"
    result = invoke("--stack", "metal", "--pods", str(pods), "--policy", "FGD,MostAllocated", "--seeds", "1,2",
                    "--json", str(out), "--processes", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = json.loads(out.read_text())
    assert {(r["policy"], r["seed"]) for r in runs} == {
        ("FGD", 1),
        ("FGD", 2),
        ("MostAllocated", 1),
        ("MostAllocated", 2),
    }
    assert all(len(r["allocated"]) == 131 and len(r["frag_amount"]) == 131 for r in runs)
    assert "FGD" in result.stdout and "MostAllocated" in result.stdout
    assert f"wrote {ROOT / 'build/metal/sim/report.md'}" in result.stdout  # the stack's own folder
    # In a log (no terminal, so Rich draws no bar) each finished run is a line.
    progress = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 4 and progress[-1].startswith("[4/4] ")
    assert {line.split(":")[0].split("] ")[1] for line in progress} == {
        "FGD seed 1", "FGD seed 2", "MostAllocated seed 1", "MostAllocated seed 2",
    }  # fmt: skip
    sim_dir = ROOT / "build/metal/sim"
    report = (sim_dir / "report.md").read_text()
    assert "| FGD |" in report and "| MostAllocated |" in report
    for png in ("unallocated.png", "fragmentation.png"):
        assert (sim_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        (["4000,16384,1,1000,", "4000,-5,1,1000,"], "row 2"),
        (["4000,16384,1,abc,"], "row 1"),
        (["4000,16384,16,1000,"], "row 1"),  # 16 GPUs: larger than every node of the metal stack
    ],
    ids=["negative", "non-numeric", "larger-than-every-node"],
)
def test_malformed_trace_exits_2_naming_file_and_row(tmp_path: Path, rows: list[str], words: str) -> None:
    pods = _pods(tmp_path, rows)
    result = invoke("--stack", "metal", "--pods", str(pods), "--seeds", "1", "--processes", "1", "--strict")
    assert result.returncode == 2, result.stdout + result.stderr
    assert str(pods) in result.stderr and words in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_column_and_unknown_policy_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("cpu_milli,num_gpu\n1,1\n")
    result = invoke("--stack", "dev", "--pods", str(bad))
    assert result.returncode == 2 and "memory_mib" in result.stderr
    good = _pods(tmp_path, ["1000,1024,1,1000,"])
    result = invoke("--stack", "dev", "--pods", str(good), "--policy", "Tetris")
    assert result.returncode == 2 and "FGD" in result.stderr


def test_needs_exactly_one_cluster_source(tmp_path: Path) -> None:
    result = invoke("--pods", str(_pods(tmp_path, ["1000,1024,1,1000,"])))
    assert result.returncode == 2 and "--stack" in result.stderr


def test_pod_no_node_can_host_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    """Traces as they are: the unhostable pod is counted failed and named with its row; --strict refuses it."""
    pods = _pods(tmp_path, ["4000,16384,1,1000,", "4000,16384,16,1000,", "2000,8192,1,500,"])
    result = invoke("--stack", "metal", "--pods", str(pods), "--seeds", "1", "--processes", "1",
                    "--policy", "FGD,MostAllocated")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "1 pods no node can ever host" in result.stdout
    assert f"{pods}, row 2 (line 3)" in result.stdout.replace("\n", "")


def test_stack_is_simulated_as_deployed(tmp_path: Path) -> None:
    """CPU-only pods leave the GPU nodes (tainted), shares become one replica of a time-sliced pool, and the
    deployed profile runs with the stack's weights; FGD-Extender answers through the extender protocol."""
    pods = _pods(
        tmp_path, ["4000,16384,1,1000,", "2000,8192,1,300,", "1000,1024,0,0,", "8000,32768,4,1000,L40S"]
    )
    out = tmp_path / "runs.json"
    result = invoke(
        "--stack", "metal", "--pods", str(pods), "--seeds", "1", "--processes", "1", "--json", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert (
        "1 CPU-only pods (1 cores, 1 GiB) go to the system pool, whose size this simulation does not limit"
        in result.stdout
    )
    assert "one unit of 500 milli-GPU (2 per GPU)" in result.stdout
    runs = json.loads(out.read_text())
    assert {r["policy"] for r in runs} == {"FGD", "FGD-Extender", "MostAllocated"}
    by = {r["policy"]: r for r in runs}
    assert by["FGD"]["allocated"] == by["FGD-Extender"]["allocated"]


def test_stack_model_routes_pods_as_deployed() -> None:
    """Pools, taints, GPU resources, Kueue flavors and the profile as sent, for an EKS and an existing stack."""
    from infra.simulate.stack import route, stack_model
    from scheduler.sim import Workload

    prod = load_example("example-prod")
    model = stack_model(prod)
    assert set(model.cluster.gpu_model) == {p.name for p in prod.node_pools}  # a node's "model" is its pool
    assert model.units["a10g-batch"] > 1 and model.units["h100-train"] == 1
    # EKS weights only cpu, memory and nvidia.com/gpu: a replica is not scored
    assert model.strategy == "MostAllocated" and model.weights["shared"] == 0
    itype = __import__("infra.catalog", fromlist=["CATALOG"]).CATALOG[prod.system_pool.instance_type]
    assert model.cpu_pool == (
        prod.system_pool.max_size * itype.vcpus * 1000,
        prod.system_pool.max_size * itype.memory_gib * 1024,
    )
    pods = Workload.build([1000, 2000, 500], [1024, 2048, 512], [0, 1, 2], [0, 300, 1000])
    routed, routing = route(model, pods, prod)
    assert routed.size == 2 and routing.cpu_only_pods == 1  # the CPU-only pod left the GPU nodes
    # 300 milli: no slice covers it, so the largest, a time-sliced replica (1/4 GPU)
    assert routed.gpu_milli.tolist() == [1000 // model.units["a10g-batch"], 1000]
    assert routed.gpu_spec[0] == "a10g-batch"
    assert set(routed.gpu_spec[1].split("|")) == {
        p for p, u in model.units.items() if u == 1 and p in model.routable
    }
    metal = stack_model(load_example("metal"))
    assert metal.cpu_pool is None and metal.weights["shared"] == metal.weights["gpu"]  # the secondary profile


def test_extender_matches_fgd_on_a_stack_with_mig_and_time_sliced_pools() -> None:
    """Units of 1000 // 7 (MIG 1g on H100) are one replica the API can express: FGD-Extender replays them."""
    from infra.simulate.stack import route, stack_model
    from scheduler.sim import Workload, run_one

    prod = load_example("example-prod")
    model = stack_model(prod)
    pods = Workload.build([4000, 2000, 1000, 8000, 1000], [16384, 8192, 1024, 32768, 2048], [1, 1, 0, 4, 1],
                          [1000, 300, 0, 1000, 150])  # fmt: skip
    routed, _ = route(model, pods, prod)
    fgd = run_one(model.cluster, routed, "FGD", 7, share_rule="distributed")
    ext = run_one(model.cluster, routed, "FGD-Extender", 7, share_rule="distributed")
    assert ext.allocated == fgd.allocated and ext.failed == fgd.failed


def test_simulate_refuses_bad_flags_up_front_and_names_routed_pools(tmp_path: Path) -> None:
    """`--policy NoSuchPolicy` is refused before the trace preamble prints; `--replicas` without
    `--as-deployed` is refused, not ignored; the unhostable listing calls the pools a stack's routing wrote into
    the gpu_spec column pools, not a `gpu_spec`."""
    pods = _pods(tmp_path, ["4000,16384,1,1000,", "4000,16384,64,1000,"])
    bad = invoke("--stack", "metal", "--pods", str(pods), "--policy", "NoSuchPolicy")
    assert bad.returncode == 2 and bad.stdout == ""
    assert (
        "--policy: unknown policy 'NoSuchPolicy'; choose from" in bad.stderr and "FGD-Extender" in bad.stderr
    )
    ignored = invoke("--stack", "metal", "--pods", str(pods), "--replicas", "4")
    assert ignored.returncode == 2 and "--replicas applies to --as-deployed" in ignored.stderr
    listed = invoke(
        "--stack", "metal", "--pods", str(pods), "--policy", "FGD", "--seeds", "1", "--processes", "1"
    )
    assert listed.returncode == 0, listed.stderr
    text = " ".join(listed.stdout.split())
    assert "num_gpu 64, routed to pools " in text and "gpu_spec" not in text


def test_plots_show_the_band_where_policies_differ_and_no_hidden_line() -> None:
    """The plots have a title, a y-axis zoomed to the band where the policies differ (not 0-100 % for a 0-15 %
    sliver), and a style per policy, FGD-Extender labelled as equal to FGD rather than drawn hidden under it."""
    from scheduler import sim
    from scheduler.sim.report import curve_layout

    c = sim.Cluster.build(["a", "b", "c"], [32000] * 3, [65536] * 3, [4, 4, 8], ["T4", "T4", "V100"])
    w = sim.Workload.build([2000] * 12, [4096] * 12, [1] * 12, [1000] * 6 + [500] * 6, [""] * 12)
    runs = sim.run_many(c, w, ["FGD", "MostAllocated", "LeastAllocated"], [1, 2], processes=1)
    twin = [type(r)(**{**r.__dict__, "policy": "FGD-Extender"}) for r in runs if r.policy == "FGD"]
    layout = curve_layout([*runs, *twin], "allocated", invert=True, title="metal, pods.csv")
    labels = [label for label, _, _ in layout.lines]
    assert "FGD-Extender (= FGD)" in labels or "FGD (= FGD-Extender)" in labels
    assert len({style for _, style, _ in layout.lines}) == len(layout.lines)
    assert layout.title == "metal, pods.csv (seeds 1, 2)"
    assert layout.ylim is not None and layout.ylim[1] - layout.ylim[0] < 100


def test_runs_keep_their_own_folder_and_list_every_file(tmp_path: Path) -> None:
    """A run writes into a folder of its own (`--out`), so one run (e.g. --as-deployed) never replaces another's
    report and plots, and every file written is listed, not only report.md."""
    pods = _pods(tmp_path, ["4000,16384,1,1000,", "2000,8192,1,500,"])
    out = tmp_path / "mine"
    result = invoke("--stack", "metal", "--pods", str(pods), "--policy", "FGD", "--seeds", "1",
                    "--processes", "1", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    for name in ("report.md", "unallocated.png", "fragmentation.png"):
        assert f"wrote {out / name}" in result.stdout
        assert (out / name).stat().st_size > 0
