"""Trace readers: the real openb files, the generic pod CSV, and errors that name the file and row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scheduler.sim import TraceError, read_nodes, read_pods, run_one
from tests.sim.tiny import cluster

NODES_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_real_node_list(shared_dir: Path) -> None:
    c = read_nodes(shared_dir / "traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv")
    assert c.size == 1213
    assert int(c.num_gpu.sum()) == 6212
    assert list(c.names) == sorted(c.names)
    assert {"G2", "G3", "T4", "P100", "V100M16", "V100M32", "A10"} == set(c.gpu_model)


def test_real_default_pods(shared_dir: Path) -> None:
    w = read_pods(shared_dir / "traces/alibaba-gpu-v2023/openb_pod_list_default.csv")
    assert w.size == 8152
    assert int((w.num_gpu == 0).sum()) == 1088
    assert int(((w.gpu_milli > 0) & (w.gpu_milli < 1000)).sum()) == 3078
    assert int((w.num_gpu > 1).sum()) == 75


def test_generic_pod_csv_keeps_file_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        "cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n4000,1024,1,500,T4|A10\n"
        "2000,512,0,0,\n8000,2048,2,1000,\n",
    )
    w = read_pods(path)
    assert w.cpu_milli.tolist() == [4000, 2000, 8000]
    assert w.gpu_spec == ("T4|A10", "", "")
    assert list(w.names) == sorted(w.names)


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("p1,abc,1024,1,500,", "'cpu_milli' must be a non-negative integer, got 'abc'"),
        ("p1,1000,-5,1,500,", "'memory_mib' must not be negative, got -5"),
        ("p1,1000,1024,1,1500,", "gpu_milli is the request per GPU and must be 0..1000, got 1500"),
        ("p1,1000,1024,2,500,", "GPU-sharing pod (gpu_milli 500 < 1000) must have num_gpu 1, got 2"),
        ("p1,1000,1024,2,0,", "must both be 0 (CPU-only pod) or both be positive"),
        ("p1,1000,,1,500,", "'memory_mib' must be a non-negative integer, got ''"),
    ],
)
def test_bad_pod_row_names_file_and_row(tmp_path: Path, row: str, needle: str) -> None:
    path = write(tmp_path, "pods.csv", PODS_HEADER + "p0,1000,1024,1,1000,\n" + row + "\n")
    with pytest.raises(TraceError) as err:
        read_pods(path)
    message = str(err.value)
    assert str(path) in message
    assert "row 2 (line 3)" in message
    assert needle in message
    assert err.value.row == 2


def test_missing_columns_listed(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", "name,cpu_milli,num_gpu\np0,1,0\n")
    with pytest.raises(TraceError, match=r"missing column\(s\) memory_mib, gpu_milli") as err:
        read_pods(path)
    assert str(path) in str(err.value)
    assert isinstance(err.value, ValueError)


def test_bad_node_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", NODES_HEADER + "n0,8000,1024,2,T4\nn0,8000,1024,2,T4\n")
    with pytest.raises(TraceError, match=r"row 2 \(line 3\): node 'n0' already defined in row 1"):
        read_nodes(path)
    path = write(tmp_path, "nodes2.csv", NODES_HEADER + "n0,8000,1024,1.5,T4\n")
    with pytest.raises(TraceError, match=r"nodes2.csv, row 1 \(line 2\): column 'gpu'"):
        read_nodes(path)
    with pytest.raises(TraceError, match="cannot read the file"):
        read_nodes(tmp_path / "absent.csv")


def test_nodes_sorted_by_name(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", NODES_HEADER + "b,8000,1024,2,T4\na,16000,2048,1,A10\n")
    c = read_nodes(path)
    assert c.names == ("a", "b")
    assert c.num_gpu.tolist() == [1, 2]
    assert c.gpu_model == ("A10", "T4")


def test_pod_no_node_can_host_is_counted_failed_and_strict_raises(tmp_path: Path) -> None:
    """Traces as they are: a pod no node can ever host fails and the run goes on; --strict makes it an error."""
    path = write(tmp_path, "pods.csv", PODS_HEADER + "p0,1000,1024,1,1000,\np1,1000,1024,4,1000,\n")
    w = read_pods(path)
    c = cluster(*((f"n{i}", 8000, 4096, 2, "T4") for i in range(4)))  # 8 GPUs: the list is inflated, kept
    result = run_one(c, w, "FGD", 42)
    assert result.unhostable == 1
    assert result.failed >= 1  # every copy of p1 fails, the others are placed
    assert result.allocated[-1] > 0
    with pytest.raises(TraceError, match=r"row 2 \(line 3\): pod 'p1'"):
        run_one(c, w, "FGD", 42, strict=True)


def test_pod_larger_than_every_node_fails_at_run_start_under_strict(tmp_path: Path) -> None:
    path = write(
        tmp_path, "pods.csv", PODS_HEADER + "p0,1000,1024,1,1000,\np1,1000,1024,4,1000,\np2,1,1,1,500,V100\n"
    )
    w = read_pods(path)
    c = cluster(("a", 8000, 4096, 2, "T4"), ("b", 16000, 4096, 1, "A10"))
    with pytest.raises(
        TraceError, match=r"row 2 \(line 3\): pod 'p1' .*num_gpu 4.* larger than every node"
    ) as err:
        run_one(c, w, "FGD", 42, strict=True)
    assert str(path) in str(err.value)
    with pytest.raises(TraceError, match="the cluster has no GPUs"):
        run_one(cluster(("cpu", 8000, 4096, 0, "")), w, "FGD", 42)
    model_only = read_pods(write(tmp_path, "p2.csv", PODS_HEADER + "p0,1,1,1,500,V100\n"))
    with pytest.raises(TraceError, match="gpu_spec V100"):
        run_one(c, model_only, "Random", 1, strict=True)


def test_variant_workload_reads(shared_dir: Path) -> None:
    w = read_pods(shared_dir / "traces/alibaba-gpu-v2023/openb_pod_list_cpu250.csv")
    assert w.size == 9420
    assert np.all(w.gpu_milli <= 1000)
