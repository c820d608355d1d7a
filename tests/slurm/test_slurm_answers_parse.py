"""The Slurm answers' pure rooms on what Debian 12's Slurm 22.05 printed on the Slurm twin (recorded with the
formats the readers ask for: vision at its 2-H100 limit, nlp running 2, a borrowed job waiting for nodes, a
dependent job), and the Reason codes in the team's terms. The same text is produced live, and the answers
checked, by tests/slurm/test_slurm_answers.py."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from datetime import datetime

import pytest

from scheduler.explain.reasons import Reason
from scheduler.slurm.answers.job import fields, parse_job
from scheduler.slurm.answers.limits import (
    account_use,
    parse_assoc,
    parse_assoc_mgr,
    parse_qos,
    partition_tres,
    team_rows,
)
from scheduler.slurm.answers.reasons import explain
from scheduler.slurm.answers.sprio import parse_sprio
from scheduler.slurm.answers.squeue import parse_squeue, positions
from tests.conftest import ROOT
from tests.preflight.helpers import run_task

SQUEUE = """\
4|nlp|root|h100|production|PENDING|AssocGrpGRES|N/A|N/A|5:00|100000|2026-12-05T11:43:56|gres:gpu:h100:1|1
6|vision|root|h100|default|PENDING|Dependency|N/A|N/A|5:00|10000|2026-12-05T11:43:56|gres:gpu:h100:1|1
2|vision|root|h100|default|PENDING|AssocGrpGRES|N/A|N/A|5:00|10000|2026-12-05T11:43:53|gres:gpu:h100:1|1
7|vision|root|h100|default|PENDING|AssocGrpGRES|N/A|N/A|5:00|10000|2026-12-05T11:43:53|gres:gpu:h100:2|2
5|nlp-borrow|root|h100|nlp-borrow|PENDING|Resources|2026-12-05T11:48:55|N/A|5:00|1|2026-12-05T11:43:56|gres:gpu:h100:1|1
3|nlp|root|h100|default|RUNNING|None|2026-12-05T11:43:55|2026-12-05T11:48:55|5:00|10000|2026-12-05T11:43:53|gres:gpu:h100:2|1
"""
SPRIO = "2|root|h100|10000|0|0|10000|0\n5|root|h100|1|0|0|0|0\n"
ASSOC = """\
root||
root|root|
nlp||gres/gpu:h100=2,gres/gpu=2,gres/shard=0
nlp|root|
nlp-borrow||
vision||gres/gpu:h100=2,gres/gpu=2,gres/shard=2
vision|root|
vision-borrow||
vision-borrow|root|
"""
QOS = "normal|\nvision-borrow|gres/gpu:h100=2,gres/gpu=2,gres/shard=4\nproduction|\n"
TRES = "cpu=N(2),mem=N(972),node=N(1),gres/gpu={}({}),gres/gpu:h100={}({}),gres/shard={}(0)"
ASSOC_MGR = f"""\
Current Association Manager state
Association Records
ClusterName=c Account=vision UserName= Partition= Priority=0 ID=3 ParentAccount=root(1) Lft=14 DefAssoc=No \
GrpJobs=N(1) GrpTRES={TRES.format(2, 2, 2, 2, 2)} GrpTRESMins=cpu=N(0),gres/gpu=N(0) MaxJobs= MinPrioThresh=
ClusterName=c Account=vision UserName=root(0) Partition= Priority=0 ID=7 ParentAccount= Lft=15 DefAssoc=No \
GrpJobs=N(1) GrpTRES={TRES.format("N", 2, "N", 2, "N")} GrpTRESMins=cpu=N(0) MaxJobs= MinPrioThresh=
"""
QOS_MGR = """\
Current Association Manager state
QOS Records
QOS=vision-borrow(2) UsageRaw=0.000000 GrpJobs=N(0) GrpTRES=cpu=N(0),gres/gpu=2(1),gres/gpu:h100=2(1),gres/shard=4(0) \
GrpTRESMins=cpu=N(0) MaxWallPJ= PreemptMode=REQUEUE Priority=0 Account Limits=No Accounts User Limits=No Users
"""
SINFO = "h100|gpu:h100:2\nh100|gpu:h100:2\nl40s|gpu:l40s:1,shard:l40s:2\n"
JOB = (
    "JobId=2 JobName=my run UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=10000 Nice=0 Account=vision "
    "QOS=default JobState=PENDING Reason=AssocGrpGRES Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 "
    "TimeLimit=00:05:00 SubmitTime=2026-12-05T11:43:22 StartTime=Unknown EndTime=Unknown Partition=h100 "
    "AllocNode:Sid=localhost:19274 NodeList= NumNodes=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=1,mem=972M,node=1,billing=1,gres/gpu=1,gres/gpu:h100=1 WorkDir=/tmp/a dir/jobs TresPerNode=gres:gpu:h100:1\n"
)


def _rows():  # vision's rows from the recorded text
    live = parse_assoc_mgr(ASSOC_MGR) + parse_assoc_mgr(QOS_MGR)
    return team_rows(
        "vision", partition_tres(SINFO), parse_assoc(ASSOC), parse_qos(QOS), live, "vision-borrow"
    )


def test_squeue_lines_parse_and_positions_follow_slurmctlds_order() -> None:
    """Higher priority first, then the earlier submitted, then the lower id; a job waiting for a dependency is
    not in slurmctld's queue and has no place."""
    jobs = parse_squeue(SQUEUE)
    assert [j.job_id for j in jobs] == ["4", "6", "2", "7", "5", "3"]
    borrowed = jobs[4]
    assert borrowed.start == datetime(2026, 12, 5, 11, 48, 55) and borrowed.end is None
    assert jobs[3].nodes == 2 and jobs[5].state == "RUNNING"
    assert positions(jobs) == {"4": 0, "2": 1, "7": 2, "5": 3}


def test_a_line_of_another_shape_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="3 fields"):
        parse_squeue("1|vision|root\n")


def test_sprio_factors_add_up_to_the_priority() -> None:
    (first, second) = parse_sprio(SPRIO)
    assert (first.job_id, first.priority, first.qos, first.age, first.fairshare) == ("2", 10000, 10000, 0, 0)
    assert first.says() == "priority 10000 = QOS 10000 + fair share 0 + age 0" and second.priority == 1


def test_the_teams_rows_join_limits_and_use_per_partition() -> None:
    """The account's GrpTRES from sacctmgr, its use from slurmctld, the borrow QOS's allowance and use; a
    time-sliced partition counts shards."""
    h100, l40s = _rows()
    assert (h100.partition, h100.tres, h100.quota, h100.used, h100.whole) == (
        "h100",
        "gres/gpu:h100",
        2,
        2,
        True,
    )
    assert (h100.borrow_limit, h100.borrowed, h100.maximum) == (2, 1, 4)
    assert (l40s.tres, l40s.quota, l40s.used, l40s.borrow_limit) == ("gres/shard", 2, 0, 4)


def test_a_member_who_may_not_see_the_accounts_record_gets_their_own_use() -> None:
    """Under PrivateData=usage slurmctld sends a member only their own user association."""
    own = "\n".join(line for line in ASSOC_MGR.splitlines() if "UserName=root" in line)
    use = account_use(parse_assoc_mgr(own), "vision")
    assert use.whole is False and use.used["gres/gpu:h100"] == 2


def test_scontrol_show_job_fields_keep_values_with_spaces() -> None:
    f = fields(JOB)
    assert (
        f["JobName"] == "my run"
        and f["WorkDir"] == "/tmp/a dir/jobs"
        and f["AllocNode:Sid"] == "localhost:19274"
    )
    job = parse_job(JOB)
    assert (job.account, job.state, job.reason, job.restarts, job.dependency) == (
        "vision",
        "PENDING",
        "AssocGrpGRES",
        1,
        "",
    )
    assert job.gpus() == {"gres/gpu": 1, "gres/gpu:h100": 1} and job.start is None


@pytest.mark.parametrize(
    ("code", "asks", "borrowed", "reason", "says"),
    [
        (
            "AssocGrpGRES",
            1,
            False,
            Reason.QUOTA,
            "your team uses 2 of its 2 gres/gpu:h100 quota in partition h100",
        ),
        ("AssocGrpGRES", 4, False, Reason.OVER_LIMIT, "it asks 4 gres/gpu:h100 in partition h100, more than"),
        ("QOSGrpGRES", 1, True, Reason.QUOTA, "your team uses 1 of its 2 gres/gpu:h100 borrowing allowance"),
        ("Priority", 1, False, Reason.PRIORITY, "jobs of higher priority wait ahead of it in partition h100"),
        ("Resources", 1, False, Reason.FRAGMENTATION, "your team is within its limit (2 of 2 gres/gpu:h100)"),
        ("Dependency", 1, False, Reason.DEPENDENCY, "it waits for afterok:1(unfulfilled)"),
        ("ReqNodeNotAvail,_UnavailableNodes:gpu-h100-01", 1, False, Reason.PROVISIONING, "a node it needs"),
        ("JobHeldUser", 1, False, Reason.INACTIVE, "held by you"),
        ("PartitionTimeLimit", 1, False, Reason.OVER_LIMIT, "PartitionTimeLimit"),
        ("Licenses", 1, False, Reason.UNKNOWN, "Slurm says Licenses"),
    ],
)
def test_each_reason_code_in_the_teams_terms(
    code: str, asks: int, borrowed: bool, reason: Reason, says: str
) -> None:
    a = explain("PENDING", code, "h100", "vision", {"gres/gpu:h100": asks}, _rows(),
                dependency="afterok:1(unfulfilled)", borrowed=borrowed)  # fmt: skip
    assert a.reason is reason and says in a.says, a
    assert a.to_start


def test_a_requeued_job_says_so_and_a_running_one_has_nothing_to_do() -> None:
    assert explain("PENDING", "BeginTime", "h100", "vision", {}, _rows(), restarts=2).says.startswith(
        "requeued 2"
    )
    assert explain("RUNNING", "None", "h100", "vision", {}, _rows()).reason is Reason.RUNNING


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scheduler.slurm.answers.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_the_package_installs_gpufleet_slurm() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gpufleet-slurm"] == "scheduler.slurm.answers.cli:main"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["why"], "the following arguments are required: JOBID"),
        (["why", "train"], "JOB 'train': a Slurm job id is a number"),
        (["queue", "--nosuch"], "unrecognized arguments: --nosuch"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], said: str) -> None:
    done = cli(*args)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["quota", "--account", "vision"], "--account is for a Slurm stack (--stack)"),
        (["quota", "--stack", "metal"], "--stack metal: runs on Kubernetes"),
        (
            ["queue", "--stack", "metal-slurm", "--kubeconfig", "k"],
            "--kubeconfig: Kubernetes options, not for",
        ),
        (
            ["eta", "--stack", "metal-slurm", "--filename", "j.yaml"],
            "--filename: Kubernetes options, not for",
        ),
    ],
)
def test_the_invoke_tasks_refuse_a_mix_of_slurm_and_kubernetes_options(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    """Before anything is read: one line naming the option, exit 2."""
    done = run_task(capsys, *args)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done
