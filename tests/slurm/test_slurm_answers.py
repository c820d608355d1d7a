"""`gpufleet-slurm` (and `invoke quota|queue|why|eta --stack`) on real Slurm 22.05 daemons (the Slurm twin),
asked as team members: `nobody` is a user of vision's two accounts, `daemon` of nlp's (users every Debian host
has, so the test adds none). The stack renders PrivateData=jobs,usage, so a member sees their own jobs and
their own use only; root sees everything."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from scheduler.explain.cluster import ClusterError
from scheduler.slurm.answers import cli
from scheduler.slurm.answers.reader import Slurm
from tests.conftest import ROOT
from tests.preflight.helpers import run_task
from tests.slurm.cluster import SlurmCluster, ensure_packages, slurm_cluster
from tests.slurm.daemon_stack import daemon_stack, daemon_stack_file

pytestmark = pytest.mark.xdist_group("slurm")

VISION, NLP = "nobody", "daemon"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    """The small stack's cluster in a folder other users may read (its slurm.conf, MUNGE's socket), accounts
    applied, the two members added to their teams' accounts."""
    ensure_packages()
    root = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-answers-"))
    root.chmod(0o755)
    try:
        with slurm_cluster(daemon_stack(root), root / "cluster") as running:
            assert running.script is not None
            running.run("sh", str(running.script))
            running.run("sacctmgr", "-i", "add", "user", VISION, "account=vision,vision-borrow", check=False)
            running.run("sacctmgr", "-i", "add", "user", NLP, "account=nlp,nlp-borrow", check=False)
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


def submit(cluster: SlurmCluster, user: str, *args: str) -> str:
    """sbatch as `user` (runuser), from a folder the user may write."""
    argv = ["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", *args]
    return cluster.run(*argv, "--wrap", "sleep 300").strip().split(";")[0]


def ask(cluster: SlurmCluster, user: str, *argv: str) -> str:
    return cli.run(argv, Slurm(env=cluster.env, as_user=user))


def test_a_team_at_its_gpu_limit_sees_its_jobs_pending_with_the_reason_and_their_places(
    cluster: SlurmCluster,
) -> None:
    """vision holds its 2 guaranteed H100s; its next jobs pend with AssocGrpGRES, which the answers say as
    QuotaInUse with the team's numbers. The production-QOS job is first in line although submitted last
    (priority, then submission: job_scheduler.c `sort_job_queue2`); a 4-GPU job is over the team's limit."""
    running = submit(cluster, VISION, "--account=vision", "--gres=gpu:h100:2", "-p", "h100", "--time=5")
    cluster.wait_state(int(running), "RUNNING")
    plain = submit(cluster, VISION, "--account=vision", "--gres=gpu:h100:1", "-p", "h100", "--time=5")
    urgent = submit(cluster, VISION, "--account=vision", "--gres=gpu:h100:1", "-p", "h100", "--time=5",
                    "--qos=production")  # fmt: skip
    huge = submit(
        cluster, VISION, "--account=vision", "--gres=gpu:h100:2", "-N", "2", "-p", "h100", "--time=5"
    )
    for job in (plain, urgent, huge):
        cluster.wait(
            f"job {job} held by the limit", lambda j=job: cluster.job(int(j))["Reason"] == "AssocGrpGRES"
        )

    queue = ask(cluster, VISION, "queue").splitlines()
    assert queue[0].startswith("account vision: 3 waiting"), queue
    line = {m.group(2): (int(m.group(1)), m.group(3)) for m in
            (re.match(r"\s*(\d+)  job (\d+) .*\[(\w+)\]", ln) for ln in queue) if m}  # fmt: skip
    assert line == {urgent: (0, "QuotaInUse"), plain: (1, "QuotaInUse"), huge: (2, "OverTeamLimit")}, queue
    assert (
        "your team's 2 gres/gpu:h100 quota in partition h100 is in use (your own jobs hold 2; Slurm keeps the team's total private); 1 more needed"
        in "\n".join(queue)
    )

    why = ask(cluster, VISION, "why", plain)
    assert "[QuotaInUse]" in why and "position: 1 in partition h100" in why, why
    assert "priority 10000 = QOS 10000" in why and "Reason=AssocGrpGRES" in why, why
    assert "it asks 4 gres/gpu:h100 in partition h100, more than your team's quota there (2)" in ask(
        cluster, VISION, "why", huge
    )

    quota = ask(cluster, VISION, "quota").splitlines()
    assert quota[1].split() == [
        "PARTITION",
        "TRES",
        "QUOTA",
        "IN",
        "USE",
        "BORROW",
        "LIMIT",
        "BORROWED",
        "MAX",
    ]
    assert quota[2].split() == ["h100", "gres/gpu:h100", "2", "2", "2", "0", "4"], quota
    assert quota[3].split() == ["l40s", "gres/shard", "2", "0", "4", "0", "6"], quota
    assert "PrivateData=usage" in quota[-1], quota  # a member reads their own use: here all of vision's


def test_start_estimate_of_a_job_behind_running_ones_is_when_one_reaches_its_time_limit(
    cluster: SlurmCluster,
) -> None:
    """nlp fills the second H100 node (5-minute limit); nlp's borrowed job waits for Resources, and the
    backfill scheduler plans it at the end of a running job's time limit (which one is slurmctld's choice:
    vision's waiting jobs of higher priority may be planned onto the first node that frees): squeue --start's
    StartTime, which `eta` gives with what it assumed."""
    holder = submit(cluster, NLP, "--account=nlp", "--gres=gpu:h100:2", "-p", "h100", "--time=5")
    cluster.wait_state(int(holder), "RUNNING")
    borrowed = submit(cluster, NLP, "--account=nlp-borrow", "--gres=gpu:h100:1", "-p", "h100", "--time=5")
    ends = {datetime.fromisoformat(cluster.job(int(j))["EndTime"]) for j in cluster.run(
        "squeue", "-h", "-t", "R", "-p", "h100", "-o", "%i").split()}  # fmt: skip
    # backfill runs every bf_interval (30 s by default)
    cluster.wait(
        "a start estimate", lambda: "expected start" in ask(cluster, NLP, "eta", borrowed), timeout=90
    )
    eta = ask(cluster, NLP, "eta", borrowed)
    start = datetime.fromisoformat(re.search(r"expected start (\S+)", eta).group(1))  # type: ignore[union-attr]
    assert start in ends, (eta, ends)  # a running job's time limit, not a guess
    assert "assumed: every running job runs until its time limit" in eta, eta
    why = ask(cluster, NLP, "why", borrowed)
    assert (
        "[Fragmentation]" in why
        and "Reason=Resources" in why
        and f"expected start: {start.isoformat()}" in why
    )


def test_a_member_of_one_team_cannot_read_another_teams_jobs(cluster: SlurmCluster) -> None:
    """PrivateData=jobs (slurm.conf(5): "prevents users from viewing jobs ... belonging to other users"): nlp's
    member asking about vision's job is told there is no such job they may see (exit 2), their queue holds
    only their own jobs, while root sees vision's."""
    vision_job = next(j for j in cluster.run("squeue", "-h", "-A", "vision", "-t", "PD", "-o", "%i").split())
    with pytest.raises(ClusterError) as refused:
        ask(cluster, NLP, "why", vision_job)
    assert refused.value.exit_code == 2 and "not one you may see" in str(refused.value)
    assert "account vision" not in ask(cluster, NLP, "queue")
    with pytest.raises(ClusterError, match="--account vision-x: not a team's account"):
        ask(cluster, NLP, "queue", "--account", "vision-x")
    assert "[QuotaInUse]" in cli.run(["why", vision_job], Slurm(env=cluster.env))


def test_invoke_answers_on_the_slurm_stack_and_refuses_kubernetes_options(
    cluster: SlurmCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`invoke queue --stack SLURM-STACK --account vision` is the same answer, read as root (who sees the team's
    total); a Kubernetes option on a Slurm stack, or --stack of a Kubernetes stack, is one line, exit 2."""
    stack = str(daemon_stack_file(cluster.root.parent))
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", cluster.env["PATH"])
    done = run_task(capsys, "queue", "--stack", stack, "--account", "vision")
    assert done.returncode == 0 and "account vision: 3 waiting" in done.stdout, done
    quota = run_task(capsys, "quota", "--stack", stack, "--account", "vision")
    assert "PrivateData" not in quota.stdout and quota.stdout.splitlines()[2].split()[3] == "2", quota
    for args, said in ((["--namespace", "vision"], "--namespace: Kubernetes options"),
                       ([], "runs on Kubernetes")):  # fmt: skip
        target = stack if args else "metal"
        bad = run_task(capsys, "quota", "--stack", target, *args)
        assert bad.returncode == 2 and said in bad.stderr and bad.stderr.count("\n") == 1, bad


def test_the_slurm_section_of_the_teams_page_runs_as_written(cluster: SlurmCluster) -> None:
    """docs/teams.md, "On a Slurm cluster": its commands in page order as vision's member, the sbatch line by
    the shell, each gpufleet-slurm line through the console script's entry point, $JOB the job submitted."""
    text = (
        (ROOT / "docs" / "teams.md").read_text().split("\n## On a Slurm cluster", 1)[1].split("\n## ", 1)[0]
    )
    lines = [ln.strip() for b in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S) for ln in b.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    assert any(ln.startswith("gpufleet-slurm eta") for ln in lines), lines
    job = ""
    for line in lines:
        if line.startswith("JOB=$("):
            script = line.removeprefix("JOB=$(").removesuffix(")")
            env = {**cluster.env, "HOME": "/tmp"}
            job = subprocess.run(["runuser", "-u", VISION, "--", "bash", "-c", script], env=env, cwd="/tmp",
                                 capture_output=True, text=True, check=True, timeout=30).stdout.strip()  # fmt: skip
            continue
        argv = shlex.split(line.replace("$JOB", job))
        assert argv[0] == "gpufleet-slurm" and job, line
        said = ask(cluster, VISION, *argv[1:])
        assert said.strip() and "Traceback" not in said, (line, said)
    assert cluster.job(int(job))["Account"] == "vision"
