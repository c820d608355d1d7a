"""The rendered Slurm configuration, fast: node sizes with their margin, a job's default share of a node, GPU limits
that count untyped requests, the job_submit script's partitions, and the Slurm keys' bad input (`invoke plan`
in a subprocess: one line naming the key, exit 2, nothing written). The same behaviour on real daemons is in
test_slurm_daemons.py and test_slurm_node_sizes.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from infra.scheduling import scheduler_inputs
from infra.slurm.files import slurm_files
from infra.stackfile import load_stack
from scheduler.slurm import team_limits
from scheduler.slurm.policy import tres_list
from tests.preflight.helpers import invoke, stack_doc, write_stack

ROOT = Path(__file__).resolve().parents[2]
STACK = "metal-slurm"


def _files(tmp_path: Path, edit: Any = None) -> dict[str, str]:
    doc = stack_doc(STACK)
    if edit:
        edit(doc["config"])
    return slurm_files(load_stack(write_stack(tmp_path, "slurm-config", doc)))


def _partition(conf: str, name: str) -> dict[str, str]:
    line = next(ln for ln in conf.splitlines() if ln.startswith(f"PartitionName={name} "))
    return dict(w.split("=", 1) for w in line.split()[1:])


def test_real_memory_is_the_nominal_size_less_the_margin(tmp_path: Path) -> None:
    """RealMemory is memoryGiBPerNode x 1024 less memoryMarginPercent (default 5): a 2 TiB host whose kernel
    reports 2015 GiB still registers. The nominal size stays the pool's, for the simulator."""
    conf = _files(tmp_path)["slurm.conf"]
    assert "NodeName=gpu-h100-01,gpu-h100-02,gpu-h100-03,gpu-h100-04 Gres=gpu:h100:8 CPUs=192 " in conf
    assert f" RealMemory={2048 * 1024 * 95 // 100} " in conf
    wider = _files(tmp_path, lambda c: c["gpufleet:slurm"].update(memoryMarginPercent=10))["slurm.conf"]
    assert f" RealMemory={2048 * 1024 * 90 // 100} " in wider
    spec = load_stack(ROOT / f"Pulumi.{STACK}.yaml")
    assert spec.node_pools[0].memory_gi_b_per_node == 2048


def test_a_job_without_mem_gets_its_gpus_share_of_the_node(tmp_path: Path) -> None:
    """GPU partitions: DefMemPerGPU = RealMemory / GPUs and DefCpuPerGPU = CPUs / GPUs; the time-sliced
    partition, whose jobs ask for shards: DefMemPerCPU = RealMemory / CPUs. One DefMem* key per partition
    (slurm.conf(5): mutually exclusive)."""
    conf = _files(tmp_path)["slurm.conf"]
    real = 2048 * 1024 * 95 // 100
    h100, l40s = _partition(conf, "h100"), _partition(conf, "l40s")
    assert (h100["DefMemPerGPU"], h100["DefCpuPerGPU"]) == (str(real // 8), "24")
    assert l40s["DefMemPerCPU"] == str(512 * 1024 * 95 // 100 // 64)
    assert not {"DefMemPerCPU", "DefMemPerNode"} & set(h100) and "DefMemPerGPU" not in l40s


def test_default_time_is_written_where_the_partition_names_one(tmp_path: Path) -> None:
    conf = _files(tmp_path, lambda c: c["gpufleet:slurm"]["partitions"]["h100"].update(defaultTime="4:00:00"))
    assert _partition(conf["slurm.conf"], "h100")["DefaultTime"] == "4:00:00"
    assert "DefaultTime" not in _partition(conf["slurm.conf"], "l40s")


def test_every_gpu_limit_also_counts_untyped_gpu_requests() -> None:
    """A typed limit counts only jobs that name the type (slurm.conf(5) AccountingStorageTRES), so each GrpTRES
    also holds `gres/gpu`, the sum of the team's typed GPU limits; shards are no GPUs and stay out of it."""
    policy, pools = scheduler_inputs(load_stack(ROOT / f"Pulumi.{STACK}.yaml"))
    vision = [lim for lim in team_limits(policy, pools) if lim.team == "vision"]
    assert tres_list(vision, "guaranteed") == "gres/gpu=16,gres/gpu:h100=16,gres/shard=8"
    assert tres_list(vision, "borrowable") == "gres/gpu=8,gres/gpu:h100=8,gres/shard=16"


def test_the_job_submit_script_knows_each_partitions_gpu_type_and_is_enabled(tmp_path: Path) -> None:
    files = _files(tmp_path)
    script = files["job_submit.lua"]
    assert "JobSubmitPlugins=lua" in files["slurm.conf"].splitlines()
    assert '["h100"] = {type = "h100", shared = false},' in script
    assert '["l40s"] = {type = "l40s", shared = true},' in script
    assert 'local default_partition = "h100"' in script
    assert re.search(r"^function slurm_job_submit\(", script, re.M) and "function slurm_job_modify(" in script


def test_borrowed_work_has_an_account_of_its_own_beside_the_teams(tmp_path: Path) -> None:
    """The team's account carries only the priority-class QOS; borrowed jobs run under `<team>-borrow`, whose
    only QOS is the borrow QOS, and the team's users are users of both."""
    script = _files(tmp_path)["sacctmgr.sh"]
    assert "apply add account vision-borrow Cluster=gpufleet-metal-slurm" in script
    assert re.search(
        r"name=vision cluster=\S+ set .* QOS=production,default,preemptible DefaultQOS=default", script
    )
    assert "Account=vision,vision-borrow Cluster=gpufleet-metal-slurm" in script


@pytest.mark.parametrize(
    "edit,key",
    [
        (lambda c: c["gpufleet:slurm"].update(memoryMarginPercent=80), "gpufleet:slurm.memoryMarginPercent"),
        (
            lambda c: c["gpufleet:slurm"]["partitions"]["h100"].update(defaultTime="soon"),
            "gpufleet:slurm.partitions.h100.defaultTime",
        ),
        (
            lambda c: c["gpufleet:slurm"].update(controllerHosts=["slurm-ctl-01", "slurm-ctl-02"]),
            "gpufleet:slurm.controllerHosts",
        ),
        (
            lambda c: c["gpufleet:slurm"].update(stateSaveLocation="spool/slurmctld"),
            "gpufleet:slurm.stateSaveLocation",
        ),
        (
            lambda c: c["gpufleet:nodePools"][1].pop("memoryGiBPerNode"),
            "gpufleet:nodePools[1].memoryGiBPerNode",
        ),
        (
            lambda c: c["gpufleet:slurm"].update(healthCheckInterval=30),
            "gpufleet:slurm.healthCheckInterval",
        ),
        (
            lambda c: c["gpufleet:slurm"].update(healthCheckInterval=70000),
            "gpufleet:slurm.healthCheckInterval",
        ),
    ],
    ids=[
        "margin",
        "default-time",
        "backup-without-shared-state",
        "relative-state",
        "no-memory",
        "health-check-under-a-minute",
        "health-check-beyond-uint16",
    ],
)
def test_bad_slurm_keys_exit_2_with_one_line_naming_the_key(tmp_path: Path, edit: Any, key: str) -> None:
    doc = stack_doc(STACK)
    edit(doc["config"])
    out = tmp_path / "plan"
    done = invoke("plan", "--stack", str(write_stack(tmp_path, "bad", doc)), "--out", str(out))
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if key in ln]
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_a_backup_controller_with_shared_state_is_accepted_and_rendered(tmp_path: Path) -> None:
    def backup(config: dict[str, Any]) -> None:
        config["gpufleet:slurm"].update(controllerHosts=["slurm-ctl-01", "slurm-ctl-02"],
                                        stateSaveLocation="/shared/slurmctld")  # fmt: skip

    conf = _files(tmp_path, backup)["slurm.conf"].splitlines()
    assert [ln for ln in conf if ln.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=slurm-ctl-01",
        "SlurmctldHost=slurm-ctl-02",
    ]
    assert "StateSaveLocation=/shared/slurmctld" in conf
