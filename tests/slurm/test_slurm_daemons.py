"""The rendered Slurm configuration on real Slurm 22.05 daemons (Debian 12's), all on 127.0.0.1: munged,
MariaDB, slurmdbd, slurmctld and one slurmd per host of a small copy of the metal-slurm stack
(`tests.slurm.cluster`). Missing packages are installed as root with apt-get; without root or apt-get the
tests fail under CI=true and skip elsewhere."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.slurm.cluster import SlurmCluster, ensure_packages, slurm_cluster
from tests.slurm.daemon_stack import daemon_stack

ASSOC = ("sacctmgr", "-nP", "show", "assoc", "format=cluster,account,user,share,grptres,qos,defaultqos")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    ensure_packages()
    root = tmp_path_factory.mktemp("slurm")
    with slurm_cluster(daemon_stack(root), root / "cluster") as running:
        yield running


def test_the_sacctmgr_script_applies_and_a_second_run_changes_nothing(cluster: SlurmCluster) -> None:
    """sacctmgr(1): the generated script against a real slurmdbd; `add` of an existing cluster answers "This
    cluster ... already exists" and fails, which the script must take as success. A second run leaves
    `sacctmgr show assoc` and `show qos` identical."""
    assert cluster.script is not None
    cluster.run("sh", str(cluster.script))
    assoc = cluster.run(*ASSOC)
    qos = cluster.run("sacctmgr", "-nP", "show", "qos", "format=name,grptres,preempt,preemptmode")
    assert "|vision||100|gres/gpu:h100=2,gres/shard=2|normal,vision-borrow|normal" in assoc
    assert "vision-borrow|gres/gpu:h100=2,gres/shard=4||requeue" in qos.splitlines()
    assert qos.splitlines()[0].startswith("normal||nlp-borrow,vision-borrow|")
    cluster.run("sh", str(cluster.script))
    assert cluster.run(*ASSOC) == assoc
    assert cluster.run("sacctmgr", "-nP", "show", "qos", "format=name,grptres,preempt,preemptmode") == qos
    # docs/slurm.md: users are added to their team's account by hand
    cluster.run("sacctmgr", "-i", "add", "user", "root", "account=vision,nlp", check=False)


def test_within_quota_runs_beyond_it_pends_and_a_job_sees_its_gpus(cluster: SlurmCluster) -> None:
    """Resource Limits (resource_limits.html, GrpTRES): vision's account may hold 2 H100s; a job for 2 runs, a
    further one without the borrow QOS stays PENDING with reason AssocGrpGRES. gres.conf(5) File=: the job
    is given the GPUs of its request, CUDA_VISIBLE_DEVICES set by Slurm from the GRES."""
    first = cluster.sbatch("--account=vision", "--gres=gpu:h100:2", "-p", "h100",
                           script="env | sort | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_JOB_GPUS)='; sleep 4")  # fmt: skip
    assert cluster.wait_state(first, "RUNNING", "COMPLETED")["TRES"].endswith("gres/gpu:h100=2")
    second = cluster.sbatch("--account=vision", "--gres=gpu:h100:1", "-p", "h100")
    time.sleep(3)
    job = cluster.job(second)
    assert (job["JobState"], job["Reason"]) == ("PENDING", "AssocGrpGRES"), job
    cluster.run("scancel", str(second))
    cluster.wait_state(first, "COMPLETED")
    out = (cluster.root / "jobs" / f"{first}.out").read_text()
    assert "CUDA_VISIBLE_DEVICES=0,1" in out.splitlines(), out


def test_sacct_records_the_gpus_per_account(cluster: SlurmCluster) -> None:
    """slurm.conf(5) AccountingStorageTRES=gres/gpu,...: sacct's AllocTRES carries the job's GPUs, per
    account."""
    job = cluster.sbatch("--account=nlp", "--gres=gpu:h100:1", "-p", "h100", script="sleep 1")
    cluster.wait_state(job, "COMPLETED")
    cluster.wait("sacct record", lambda: "gres/gpu=1" in cluster.run(
        "sacct", "-nXP", "-j", str(job), "--format=account,alloctres"))  # fmt: skip
    line = cluster.run("sacct", "-nXP", "-j", str(job), "--format=account,alloctres").splitlines()[0]
    assert line.startswith("nlp|") and "gres/gpu:h100=1" in line, line
