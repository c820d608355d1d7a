"""The rendered Slurm configuration on real Slurm 22.05 daemons (Debian 12's), all on 127.0.0.1: munged,
MariaDB, slurmdbd, slurmctld and one slurmd per host of a small copy of the metal-slurm stack
(`tests.slurm.cluster`). Missing packages are installed as root with apt-get; without root or apt-get the
tests fail under CI=true and skip elsewhere."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from infra.scheduling import scheduler_inputs
from infra.slurm.site import slurm_site
from infra.slurm.usage import Allocation, parse_sacct, run_sacct, sacct_argv, usage_from_sacct
from scheduler.slurm.healthcheck import healthcheck_script
from tests.preflight.helpers import run_task
from tests.slurm.cluster import SlurmCluster, ensure_packages, slurm_cluster
from tests.slurm.daemon_stack import daemon_stack, daemon_stack_file

pytestmark = pytest.mark.xdist_group("slurm")

ACCOUNTS = "vision,vision-borrow,nlp,nlp-borrow"
ASSOC = ("sacctmgr", "-nP", "show", "assoc", "format=cluster,account,user,share,grptres,qos,defaultqos")


def _rows(text: str, tres_column: int) -> list[list[Any]]:
    """sacctmgr -nP's rows, the TRES list in `tres_column` (printed in TRES id order) as a set."""
    rows: list[list[Any]] = [line.split("|") for line in text.splitlines()]
    for row in rows:
        row[tres_column] = set(row[tres_column].split(",")) - {""}
    return rows


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
    accounts = {
        row[1]: row[3:] for row in _rows(assoc, 4) if not row[2]
    }  # account -> share, grptres, qos, default
    assert accounts["vision"] == ["100", {"gres/gpu=2", "gres/gpu:h100=2", "gres/shard=2"},
                                  "default,preemptible,production", "default"]  # fmt: skip
    assert accounts["vision-borrow"] == [
        "1",
        set(),
        "vision-borrow",
        "vision-borrow",
    ]  # an account of its own
    borrow = next(row for row in _rows(qos, 1) if row[0] == "vision-borrow")
    assert borrow == ["vision-borrow", {"gres/gpu=2", "gres/gpu:h100=2", "gres/shard=4"}, "", "requeue"]
    for name in ("production", "default", "preemptible"):  # a QOS per priority class reclaims lent GPUs
        assert any(line.startswith(f"{name}||nlp-borrow,vision-borrow|") for line in qos.splitlines()), qos
    cluster.run("sh", str(cluster.script))
    assert cluster.run(*ASSOC) == assoc
    assert cluster.run("sacctmgr", "-nP", "show", "qos", "format=name,grptres,preempt,preemptmode") == qos
    # the host running these tests has no vision-team group: its user is added as an admin would
    cluster.run("sacctmgr", "-i", "add", "user", "root", f"account={ACCOUNTS}", check=False)


def test_within_quota_runs_beyond_it_pends_and_a_job_sees_its_gpus(cluster: SlurmCluster) -> None:
    """Resource Limits (resource_limits.html, GrpTRES): vision's account may hold 2 H100s; a job for 2 runs, a
    further one without the borrow QOS stays PENDING with reason AssocGrpGRES. gres.conf(5) File=: the job
    is given the GPUs of its request, CUDA_VISIBLE_DEVICES set by Slurm from the GRES."""
    first = cluster.sbatch("--account=vision", "--gres=gpu:h100:2", "-p", "h100",
                           script="env | sort | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_JOB_GPUS)='; sleep 4")  # fmt: skip
    assert cluster.wait_state(first, "RUNNING", "COMPLETED")["TRES"].endswith("gres/gpu:h100=2")
    second = cluster.sbatch("--account=vision", "--gres=gpu:h100:1", "-p", "h100")
    # slurmctld gives a pending job its reason at its next scheduling pass
    cluster.wait(
        "the second job held by its account's limit",
        lambda: cluster.job(second)["Reason"] == "AssocGrpGRES",
        30,
    )
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


# A job script that stamps its start and end (and its restart count: sbatch(1) SLURM_RESTART_COUNT, set once a job
# was requeued) into <job id>.times, so the test knows each run's length without asking Slurm. `sleep & wait`
# lets the TERM trap run at once when Slurm signals the job (preempt.html: a preempted job is signalled, then
# requeued).
STAMP = (
    'stamp() { echo "${SLURM_RESTART_COUNT:-0} $1 $(date +%s.%N)" >> "$SLURM_JOB_ID.times"; }; '
    "trap 'stamp end; exit 143' TERM; stamp start; "
)
# Per record: sacct's whole seconds at each end (up to 1 s), and the launch before the script's first stamp
# (slurmstepd forks the batch shell; on a loaded 2-core machine that took 1.05 s once, so 1 s more).
SLOP_S = 2


def _stamped(seconds: str) -> str:
    return STAMP + f"sleep {seconds} & wait; stamp end"


HOLD_S = 300  # a held job's own deadline, should the test never release it
HELD_MIN_S = (
    4  # and its least run: sacct's elapsed time is whole seconds, and the usage tests need it above 0
)


def _held() -> str:
    """A stamped job that runs until the test releases it (the file `<job id>.release` in the jobs folder), and
    at least HELD_MIN_S: the test reads the jobs' states while they must still run, however slowly a loaded
    machine gets there."""
    release = 'until [ -e "$SLURM_JOB_ID.release" ]; do sleep 0.2; done'
    wait = f"timeout {HOLD_S} sh -c 'sleep {HELD_MIN_S}; {release}'"
    return STAMP + f"{wait} & wait; stamp end"


@dataclass
class Borrowing:
    """What the borrowing scenario saw, for the tests that check it."""

    jobs: dict[str, int]  # role -> job id
    running: dict[str, dict[str, str]]  # role -> `scontrol show job` while the borrowed job runs
    preempted: dict[str, dict[str, str]]  # role -> `scontrol show job` once the owner's job runs
    requeued_at: float  # the end of the borrowed job's first run (sacct)
    runs: dict[tuple[int, int], float]  # (job id, restart count) -> seconds, from the job's own stamps
    start: float
    end: float
    sacct: str  # run_sacct's text for [start, end], from the real daemons
    sacct_latest: str  # the same sacct call without -D


def _runs(cluster: SlurmCluster, job_ids: list[int]) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for job in job_ids:
        stamps: dict[tuple[int, str], float] = {}
        for line in (cluster.root / "jobs" / f"{job}.times").read_text().splitlines():
            restart, what, at = line.split()
            stamps.setdefault((int(restart), what), float(at))
        for (run, what), began in stamps.items():
            if what == "start":
                out[(job, run)] = stamps[(run, "end")] - began
    return out


def _epoch(scontrol_time: str) -> float:
    return datetime.fromisoformat(scontrol_time).timestamp()  # scontrol prints local time


@pytest.fixture(scope="module")
def borrowing(cluster: SlurmCluster) -> Borrowing:
    """vision holds its 2 guaranteed H100s (job `within`) and borrows nlp's 2 idle ones with vision-borrow
    (`borrowed`), plus a shard of the time-sliced L40S (`shard`); nlp then asks for its own 2 (`owner`). Once
    the borrowed job is requeued it is made eligible at once (scontrol update StartTime=now) so its second run
    completes within the test. `within` and `owner` run until the test has read every job's state, then end by
    themselves as the others do, so sacct's records are final."""
    assert cluster.script is not None
    cluster.run("sh", str(cluster.script))
    cluster.run("sacctmgr", "-i", "add", "user", "root", f"account={ACCOUNTS}", check=False)
    start = math.ceil(time.time())
    time.sleep(start - time.time())
    jobs = {
        "within": cluster.sbatch("--account=vision", "--gres=gpu:h100:2", "-p", "h100", script=_held()),
        "borrowed": cluster.sbatch(
            "--account=vision-borrow", "--gres=gpu:h100:2", "-p", "h100",
            script=_stamped('"$([ "${SLURM_RESTART_COUNT:-0}" = 0 ] && echo 120 || echo 2)"'),
        ),
        "shard": cluster.sbatch("--account=vision", "--gres=shard:1", "-p", "l40s", script=_stamped("3")),
    }  # fmt: skip
    for role in ("within", "borrowed"):
        cluster.wait_state(jobs[role], "RUNNING")
    running = {role: cluster.job(job) for role, job in jobs.items()}
    jobs["owner"] = cluster.sbatch("--account=nlp", "--gres=gpu:h100:2", "-p", "h100", script=_held())
    cluster.wait_state(jobs["borrowed"], "PENDING")
    cluster.wait_state(jobs["owner"], "RUNNING")
    preempted = {role: cluster.job(job) for role, job in jobs.items()}
    for role in ("within", "owner"):
        (cluster.root / "jobs" / f"{jobs[role]}.release").touch()

    def preempted_run() -> str:
        return cluster.run("sacct", "-nXP", "-D", "-j", str(jobs["borrowed"]), "--format=state,end",
                           env={"SLURM_TIME_FORMAT": "%s"})  # fmt: skip

    cluster.wait("the preempted run's record", lambda: "PREEMPTED|" in preempted_run())
    requeued_at = float(preempted_run().split("PREEMPTED|", 1)[1].split()[0])
    cluster.run("scontrol", "update", f"JobId={jobs['borrowed']}", "StartTime=now")
    for job in jobs.values():
        cluster.wait_state(job, "COMPLETED", timeout=60)
    end = math.ceil(time.time())
    time.sleep(end - time.time())
    argv = sacct_argv(start, end)
    cluster.wait(
        "sacct's final records",
        lambda: cluster.run(*argv).count("COMPLETED") == 4 and "PREEMPTED" in cluster.run(*argv),
    )
    latest = [a for a in argv if a != "-D"]
    return Borrowing(jobs, running, preempted, requeued_at, _runs(cluster, list(jobs.values())), start, end,
                     sacct=run_sacct(start, end, env=cluster.env), sacct_latest=cluster.run(*latest))  # fmt: skip


def test_a_borrowed_job_runs_on_idle_gpus_and_is_requeued_when_the_owner_needs_them(
    borrowing: Borrowing,
) -> None:
    """Borrowing that gives way, on real slurmctld. Under the account vision-borrow and its QOS (GrpTRES
    gres/gpu:h100=2) vision runs 2 H100s beyond its own account's GrpTRES of 2, on nlp's idle GPUs. slurm.conf(5) PreemptType=preempt/qos, sacctmgr(1) QOS
    `Preempt` ("Other QOS' this QOS can preempt") and `PreemptMode`: nlp's job in QOS default (its priority class), whose
    Preempt list holds vision-borrow, preempts the borrowed job and starts; preempt.html (slurm-22-05-8-1,
    doc/html/preempt.shtml, PreemptMode REQUEUE): the job is requeued because JobRequeue=1; vision's job within
    its quota (QOS default, preempted by no QOS) keeps running. The requeued job is PENDING with Reason BeginTime,
    Restarts=1, until cred_expire + 1 seconds after the requeue (src/slurmctld/job_mgr.c, batch_requeue_fini, at
    slurm-22-05-8-1: begin_time = now + cred_lifetime + 1; slurm.conf(5) AuthInfo cred_expire, default 120:
    "This also controls how long a requeued job must wait before starting again"); sacct(1) state PREEMPTED for
    the first run. Its second run (sbatch(1) SLURM_RESTART_COUNT=1) starts the script again and completes."""
    running, preempted = borrowing.running, borrowing.preempted
    assert running["within"]["JobState"] == running["borrowed"]["JobState"] == "RUNNING", running
    assert running["borrowed"]["QOS"] == "vision-borrow"
    assert (
        running["borrowed"]["TRES"].endswith("gres/gpu:h100=2")
        and running["within"]["NodeList"] != (running["borrowed"]["NodeList"])
    )
    borrowed = preempted["borrowed"]
    assert (borrowed["JobState"], borrowed["Reason"], borrowed["Restarts"]) == (
        "PENDING",
        "BeginTime",
        "1",
    ), borrowed
    assert borrowed["Requeue"] == "1"
    assert abs(_epoch(borrowed["EligibleTime"]) - (borrowing.requeued_at + 121)) <= 3, borrowed
    assert preempted["owner"]["JobState"] == "RUNNING"
    assert preempted["owner"]["NodeList"] == running["borrowed"]["NodeList"], preempted["owner"]
    assert preempted["within"]["JobState"] == "RUNNING" and preempted["within"]["Restarts"] == "0"
    states = [(a.job, a.state) for a in parse_sacct(borrowing.sacct)]
    job = str(borrowing.jobs["borrowed"])
    assert states.count((job, "PREEMPTED")) == 1 and states.count((job, "COMPLETED")) == 1, states
    assert (borrowing.jobs["borrowed"], 1) in borrowing.runs  # the script ran again, as a restart


def test_sacct_shows_a_requeued_jobs_earlier_run_only_with_duplicates(borrowing: Borrowing) -> None:
    """sacct(1) -D, --duplicates: without it sacct returns the most recent record of a job id, so the preempted
    run of the requeued job (and its GPU-hours) is missing; `run_sacct` passes -D."""
    job = str(borrowing.jobs["borrowed"])
    latest = [(a.job, a.state) for a in parse_sacct(borrowing.sacct_latest)]
    assert (job, "COMPLETED") in latest and (job, "PREEMPTED") not in latest, latest
    assert (job, "PREEMPTED") in [(a.job, a.state) for a in parse_sacct(borrowing.sacct)]


def test_the_parser_reads_what_the_real_sacct_printed(borrowing: Borrowing, cluster: SlurmCluster) -> None:
    """parse_sacct on sacct's own output: one record per run, the account, partition, QOS, state, and the GRES
    of AllocTRES (slurm.conf(5) AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/shard) equal to what
    `scontrol show job` said of each job's TRES; -T: a record's ElapsedRaw lies within the window."""
    by_job: dict[str, list[Allocation]] = {}
    for alloc in parse_sacct(borrowing.sacct):
        by_job.setdefault(alloc.job, []).append(alloc)
    assert set(by_job) == {str(j) for j in borrowing.jobs.values()}, borrowing.sacct
    for role, job in borrowing.jobs.items():
        shown = cluster.job(job)
        for alloc in by_job[str(job)]:
            assert (alloc.account, alloc.partition, alloc.qos) == (
                shown["Account"], shown["Partition"], shown["QOS"]), (role, alloc)  # fmt: skip
            gres = {
                k: int(v)
                for k, v in (t.split("=") for t in shown["TRES"].split(","))
                if k.startswith("gres/")
            }
            assert {k: v for k, v in alloc.tres.items() if k.startswith("gres/")} == gres, (role, alloc)
            assert 0 < alloc.seconds <= borrowing.end - borrowing.start


def test_usage_from_sacct_is_the_jobs_gpu_seconds(borrowing: Borrowing, cluster: SlurmCluster) -> None:
    """`invoke usage` on a Slurm stack: allocated GPU-hours per team (account) and pool (partition) from the real
    sacct equal the GPUs of each run x its length from the job's own stamps, within SLOP_S seconds per record; a
    shard of the time-sliced L40S (replicas 2) is half a GPU; the preempted run counts (it held its GPUs) and is
    reported as preempted, the borrowed job's runs as borrowed; quota GPU-hours are the team's guaranteed GPUs x
    the window."""
    runs, jobs = borrowing.runs, borrowing.jobs

    def gpu_s(*keys: tuple[int, int], gpus: float = 2) -> float:
        return sum(gpus * runs[k] for k in keys)

    within, shard, owner = (jobs["within"], 0), (jobs["shard"], 0), (jobs["owner"], 0)
    first, second = (jobs["borrowed"], 0), (jobs["borrowed"], 1)
    want = {
        ("team", "vision"): (gpu_s(within, first, second) + gpu_s(shard, gpus=0.5), 2 * 3 + 0.5),
        ("team", "nlp"): (gpu_s(owner), 2.0),
        ("pool", "h100"): (gpu_s(within, first, second, owner), 2 * 4.0),
        ("pool", "l40s"): (gpu_s(shard, gpus=0.5), 0.5),
    }
    report = usage_from_sacct(cluster.spec, borrowing.sacct, "test", borrowing.start, borrowing.end)
    rows = {("team", r.name): r for r in report.teams} | {("pool", r.name): r for r in report.pools}
    for key, (seconds, gpus) in want.items():
        assert abs(rows[key].allocated_h * 3600 - seconds) <= gpus * SLOP_S, (key, rows[key], seconds)
    vision = rows[("team", "vision")]
    assert abs(vision.borrowed_h * 3600 - gpu_s(first, second)) <= 2 * 2 * SLOP_S, vision
    assert abs(vision.preempted_h * 3600 - gpu_s(first)) <= 2 * SLOP_S, vision
    assert (vision.jobs, rows[("team", "nlp")].jobs) == (4, 1)
    hours = (borrowing.end - borrowing.start) / 3600
    assert vision.quota_h == pytest.approx(3 * hours) and rows[("pool", "h100")].quota_h == pytest.approx(
        4 * hours
    )
    assert vision.quota_utilisation == pytest.approx(vision.allocated_h / vision.quota_h)
    print({k: round(r.allocated_h * 3600, 1) for k, r in rows.items()}, "GPU-s; want", want)


def test_invoke_usage_on_the_slurm_stack_reads_sacct(
    borrowing: Borrowing,
    cluster: SlurmCluster,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The task end to end against the real daemons: `invoke usage --stack PATH --json --since 1m --until T` runs
    sacct (SLURM_CONF names the cluster) and prints the report of the same window as `usage_from_sacct`."""
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    stack = str(daemon_stack_file(cluster.root.parent))
    end = str(borrowing.end)
    result = run_task(capsys, "usage", "--stack", stack, "--json", "--since", "1m", "--until", end)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    text = run_sacct(borrowing.end - 60, borrowing.end, env=cluster.env)
    want = usage_from_sacct(
        cluster.spec, text, "1m", borrowing.end - 60, borrowing.end, {"h100": None, "l40s": None}
    )
    assert got == json.loads(json.dumps(want.as_dict())), got
    assert got["source"] == "sacct" and got["teams"][0]["name"] == "vision"
    assert got["teams"][0]["allocated_gpu_hours"] > 0 and got["teams"][0]["preempted_gpu_hours"] > 0
    table = run_task(capsys, "usage", "--stack", stack, "--since", "1m", "--until", end)
    assert table.returncode == 0 and "preempted GPU-h" in table.stdout, table
    assert run_task(capsys, "usage", "--stack", stack, "--csv", "--since", "1m").stdout.startswith(
        "kind,name,"
    )


# ---- every GPU request is counted, a job's default share of a node, borrowing first -------------------------


def _reason(cluster: SlurmCluster, job: int, reason: str) -> dict[str, str]:
    """The job once slurmctld gave it `reason` (a pending job gets its reason at the next scheduling pass)."""
    cluster.wait(f"job {job} pending with {reason}", lambda: cluster.job(job)["Reason"] == reason, 30)
    return cluster.job(job)


def _cancel_all(cluster: SlurmCluster) -> None:
    cluster.run("scancel", "--user=root", check=False)
    cluster.wait("no job left", lambda: not cluster.run("squeue", "-h", check=False).strip(), timeout=30)


@pytest.fixture(scope="module")
def accounts(cluster: SlurmCluster) -> SlurmCluster:
    """The cluster with its accounts applied and root a user of every team's two accounts."""
    assert cluster.script is not None
    cluster.run("sh", str(cluster.script))
    cluster.run("sacctmgr", "-i", "add", "user", "root", f"account={ACCOUNTS}", check=False)
    return cluster


def test_untyped_gpu_requests_count_against_the_teams_limit(accounts: SlurmCluster) -> None:
    """What ML launchers write, `--gpus=N`, `--gres=gpu:N` and `--gpus-per-node=N`, names no GPU type, and a
    typed limit counts only jobs that name its type (slurm.conf(5) AccountingStorageTRES). job_submit.lua
    (JobSubmitPlugins=lua) names the partition's type, so vision's `--gpus=2` holds its 2 guaranteed H100s as
    gres/gpu:h100=2, and a further `--gres=gpu:1` or `--gpus-per-node=1` pends with AssocGrpGRES although the
    other node's GPUs are idle. A whole GPU of the time-sliced partition is refused at submission."""
    cluster = accounts
    _cancel_all(cluster)
    first = cluster.sbatch("--account=vision", "--gpus=2", "-p", "h100")
    held = cluster.wait_state(first, "RUNNING")
    assert "gres/gpu:h100=2" in held["TRES"].split(","), held
    for request in ("--gres=gpu:1", "--gpus-per-node=1"):
        beyond = cluster.sbatch("--account=vision", request, "-p", "h100")
        job = _reason(cluster, beyond, "AssocGrpGRES")
        assert job["JobState"] == "PENDING", (request, job)
    refused = cluster.run("sbatch", "--account=vision", "--gres=gpu:1", "-p", "l40s", "--wrap", "true",
                          check=False)  # fmt: skip
    assert "shares its GPUs: request shards" in refused, refused
    _cancel_all(cluster)


def test_jobs_without_mem_get_their_gpus_share_so_two_share_a_node_and_two_shards_a_gpu(
    accounts: SlurmCluster,
) -> None:
    """A job that names no --mem gets DefMemPerGPU per GPU (DefCpuPerGPU cores) on a GPU partition and
    DefMemPerCPU on the time-sliced one, not the whole node's memory (slurm.conf(5) DefMemPerGPU: "Default real
    memory size available per allocated GPU"): two 1-GPU jobs run at once on one 2-GPU node, and two shard jobs
    at once on the L40S host's one GPU."""
    cluster = accounts
    _cancel_all(cluster)
    gpus = [cluster.sbatch("--account=vision", "--gres=gpu:h100:1", "-p", "h100", "-w", "gpu-h100-01")
            for _ in range(2)]  # fmt: skip
    shards = [cluster.sbatch("--account=vision", "--gres=shard:1", "-p", "l40s") for _ in range(2)]
    for job in (*gpus, *shards):
        ran = cluster.wait_state(job, "RUNNING")
        assert ran["NodeList"] in ("gpu-h100-01", "gpu-l40s-01"), ran
    memory = {cluster.job(j)["TRES"] for j in gpus}
    assert all("mem=486M" in tres.split(",") for tres in memory), memory  # 972 MiB RealMemory / 2 GPUs
    _cancel_all(cluster)


def test_a_team_that_borrowed_first_starts_its_guaranteed_job_by_preempting_its_own_borrowed_work(
    accounts: SlurmCluster,
) -> None:
    """vision borrows first (2 H100s under vision-borrow on gpu-h100-01), nlp takes its guaranteed 2 on the other
    node, then vision asks for its own guaranteed 2. slurmctld checks limits before it preempts
    (src/slurmctld/node_scheduler.c, select_nodes, at slurm-22-05-8-1), so the borrowed job must not count
    against vision's guarantee: it runs under the sibling account vision-borrow. vision's job preempts its own
    borrowed one (its QOS default lists vision-borrow in Preempt) and starts; the borrowed job is requeued."""
    cluster = accounts
    _cancel_all(cluster)
    borrowed = cluster.sbatch("--account=vision-borrow", "--gres=gpu:h100:2", "-p", "h100", "-w", "gpu-h100-01",
                              "--requeue")  # fmt: skip
    cluster.wait_state(borrowed, "RUNNING")
    owner = cluster.sbatch("--account=nlp", "--gres=gpu:h100:2", "-p", "h100", "-w", "gpu-h100-02")
    cluster.wait_state(owner, "RUNNING")
    guaranteed = cluster.sbatch("--account=vision", "--gres=gpu:h100:2", "-p", "h100")
    started = cluster.wait_state(guaranteed, "RUNNING", timeout=60)
    assert started["NodeList"] == "gpu-h100-01", started
    requeued = cluster.job(borrowed)
    assert (requeued["JobState"], requeued["Restarts"]) == ("PENDING", "1"), requeued
    assert cluster.job(owner)["JobState"] == "RUNNING"
    _cancel_all(cluster)


# ---- the node health check ----------------------------------------------------------------------------------


def _node(cluster: SlurmCluster, node: str) -> dict[str, str]:
    """`scontrol -o show node`'s State and Reason (the reason without its `[user@time]`)."""
    out = cluster.run("scontrol", "-o", "show", "node", node)
    state = out.split(" State=", 1)[1].split()[0]
    reason = out.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in out else ""
    return {"State": state, "Reason": reason}


def _healthcheck(cluster: SlurmCluster, node: str, gpus: tuple[int, ...]) -> subprocess.CompletedProcess[str]:
    """gpufleet-healthcheck as slurmd runs it (slurmd.c `run_script_health_check`: SLURMD_NODENAME only, as
    root), with the twin's slurm.conf (SLURM_CONF) and the node's GPU device files in a folder of its own (only
    `gpus` of them there; the twin's nodes share this machine's /dev)."""
    dev = cluster.root / "healthcheck" / node
    shutil.rmtree(dev, ignore_errors=True)
    dev.mkdir(parents=True)
    for n in gpus:
        (dev / f"nvidia{n}").symlink_to("/dev/null")  # a character device, like /dev/nvidiaN
    script = dev / "gpufleet-healthcheck"
    script.write_text(
        healthcheck_script(slurm_site(cluster.spec), scheduler_inputs(cluster.spec)[1], str(dev))
    )
    script.chmod(0o755)
    env = {"SLURMD_NODENAME": node, "SLURM_CONF": cluster.env["SLURM_CONF"]}
    return subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_health_check_drains_a_node_with_a_missing_gpu_and_keeps_its_job_and_an_admins_drain(
    accounts: SlurmCluster,
) -> None:
    """slurm.conf(5) HealthCheckProgram: the program drains the node itself (`scontrol update ... State=DRAIN
    Reason=...`). gpu-h100-01 runs a job and loses /dev/nvidia1: it is drained with the reason naming that
    file (MIXED+DRAIN: no new job starts) and its job keeps running; gpu-h100-02, which an admin drained ("bad
    GPU"), keeps the admin's reason although it lost a GPU too; gpu-l40s-01 with its GPU is healthy (exit 0)
    and stays idle. Nothing is resumed by the check."""
    cluster = accounts
    _cancel_all(cluster)
    job = cluster.sbatch("--account=vision", "--gres=gpu:h100:1", "-p", "h100", "-w", "gpu-h100-01")
    cluster.wait_state(job, "RUNNING")
    cluster.run("scontrol", "update", "NodeName=gpu-h100-02", "State=DRAIN", "Reason=bad GPU")
    try:
        lost = _healthcheck(cluster, "gpu-h100-01", gpus=(0,))
        missing = cluster.root / "healthcheck" / "gpu-h100-01" / "nvidia1"
        reason = f"gpufleet-healthcheck: 1 of 2 GPUs missing ({missing})"
        assert lost.returncode == 1 and reason in lost.stdout, lost
        cluster.wait("gpu-h100-01 drained", lambda: "DRAIN" in _node(cluster, "gpu-h100-01")["State"], 20)
        assert _node(cluster, "gpu-h100-01") == {"State": "MIXED+DRAIN", "Reason": reason}
        assert cluster.job(job)["JobState"] == "RUNNING"
        admins = _healthcheck(cluster, "gpu-h100-02", gpus=(0,))
        assert admins.returncode == 1 and "for another reason (bad GPU)" in admins.stdout, admins
        assert _node(cluster, "gpu-h100-02") == {"State": "IDLE+DRAIN", "Reason": "bad GPU"}
        healthy = _healthcheck(cluster, "gpu-l40s-01", gpus=(0,))
        assert (healthy.returncode, healthy.stdout) == (0, ""), healthy
        assert _node(cluster, "gpu-l40s-01") == {"State": "IDLE", "Reason": ""}
        again = _healthcheck(cluster, "gpu-h100-01", gpus=(0, 1))  # the GPU is back: still drained
        assert again.returncode == 0 and "DRAIN" in _node(cluster, "gpu-h100-01")["State"]
        assert cluster.job(job)["JobState"] == "RUNNING"
    finally:
        for node in ("gpu-h100-01", "gpu-h100-02"):
            cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        _cancel_all(cluster)
