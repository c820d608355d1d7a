"""Node sizes as a real host reports them: slurmd reports this machine's cores and memory (no
`SlurmdParameters=config_overrides`), and slurmctld checks them against the rendered NodeName line, as it does on
every real host (SchedMD/slurm@slurm-22-05-8-1 src/slurmctld/node_mgr.c, `validate_node_specs`: a node that
reports less memory than RealMemory is drained "Low RealMemory")."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.cluster import ensure_packages, slurm_cluster
from tests.slurm.daemon_stack import H100_HOSTS, daemon_stack

pytestmark = pytest.mark.xdist_group("slurm")


def _mem_total_mib() -> int:
    """MemTotal of /proc/meminfo, what slurmd reports as RealMemory (slurmd -C)."""
    line = next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal:"))
    return int(line.split()[1]) // 1024


def test_a_host_a_little_below_its_nominal_memory_registers_and_takes_jobs(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The pool says this machine's memory rounded up to whole GiB, as a spec names a 2 TiB host whose kernel
    reports a little less. RealMemory is that size less `memoryMarginPercent` (5), so the node registers idle
    and runs a job; the nominal size stays the pool's (the simulator's)."""
    ensure_packages()
    tmp_path = tmp_path_factory.mktemp("sizes")  # short: slurmstepd's socket path must stay under 108 bytes
    real = _mem_total_mib()
    nominal_gib = math.ceil(real / 1024)
    assert nominal_gib * 1024 > real and nominal_gib * 1024 * 95 // 100 <= real  # a little below nominal

    def one_host_of_this_size(config: dict[str, Any]) -> None:
        h100 = config["gpufleet:nodePools"][0]
        h100.update(hosts=H100_HOSTS[:1], cpusPerNode=os.cpu_count() or 1, memoryGiBPerNode=nominal_gib)
        config["gpufleet:nodePools"] = [h100]
        config["gpufleet:slurm"]["partitions"] = {"h100": {"default": True}}
        for team in config["gpufleet:teams"]:
            team.update(quotas={"h100": 1}, borrowingLimit=1)

    spec = daemon_stack(tmp_path, one_host_of_this_size)
    assert spec.node_pools[0].memory_gi_b_per_node == nominal_gib
    # start() waits for every node to register idle
    with slurm_cluster(spec, tmp_path / "cluster", stack_hardware=False) as cluster:
        node = cluster.run("scontrol", "-o", "show", "node", H100_HOSTS[0])
        assert "State=IDLE" in node and f"RealMemory={nominal_gib * 1024 * 95 // 100} " in node, node
        assert cluster.script is not None
        cluster.run("sh", str(cluster.script))
        cluster.run("sacctmgr", "-i", "add", "user", "root", "account=vision", check=False)
        job = cluster.sbatch("--account=vision", "--gres=gpu:h100:1", "-p", "h100", script="true")
        assert cluster.wait_state(job, "COMPLETED", "FAILED")["JobState"] == "COMPLETED"
