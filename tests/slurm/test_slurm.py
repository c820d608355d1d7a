"""The Slurm mapping of a stack: the same numbers as Kueue, only documented Slurm 22.05 options, the rules that
refuse what Slurm cannot express, and `invoke plan`/`invoke render` on a Slurm stack."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra.errors import ConfigError
from infra.scheduling import scheduler_inputs
from infra.slurm.files import slurm_files
from infra.stackfile import load_stack
from scheduler.kueue import kueue_objects
from scheduler.resources import gpu_resource
from scheduler.slurm import team_limits
from tests.preflight.helpers import run_task, stack_doc, write_stack
from tests.support import require

ROOT = Path(__file__).resolve().parents[2]
STACK = "metal-slurm"
MAN = Path("/usr/share/man")


def _spec(tmp_path: Path, edit: Any = None) -> Any:
    doc = stack_doc(STACK)
    if edit:
        edit(doc["config"])
    return load_stack(write_stack(tmp_path, "slurm-variant", doc))


def _problems(tmp_path: Path, edit: Any) -> str:
    with pytest.raises(ConfigError) as exc:
        _spec(tmp_path, edit)
    return str(exc.value)


def test_limits_are_the_kueue_quotas() -> None:
    """The guaranteed GrpTRES is the team's ClusterQueue `nominalQuota` and the borrow QOS's GrpTRES its
    `borrowingLimit`, in the pool's units (shards for time-slicing), from the same views."""
    spec = load_stack(ROOT / f"Pulumi.{STACK}.yaml")
    policy, pools = scheduler_inputs(spec)
    by_pool = {p.name: p for p in pools}
    queues = {o["metadata"]["name"]: o for o in kueue_objects(policy, pools) if o["kind"] == "ClusterQueue"}
    limits = team_limits(policy, pools)
    assert len(limits) == len(policy.teams) * len(pools)
    for lim in limits:
        flavors = {f["name"]: f for g in queues[lim.team]["spec"]["resourceGroups"] for f in g["flavors"]}
        res = next(r for r in flavors[lim.pool]["resources"] if r["name"] == gpu_resource(by_pool[lim.pool]))
        assert (lim.guaranteed, lim.borrowable) == (res["nominalQuota"], res["borrowingLimit"]), lim
    # the time-sliced pool counts shards: 4 GPUs x 2 replicas for vision
    assert ("vision", "l40s", "gres/shard", 8) in {(x.team, x.pool, x.tres, x.guaranteed) for x in limits}


def test_unlimited_borrowing_is_the_rest_of_the_pool(tmp_path: Path) -> None:
    """Without `borrowingLimit`, Kueue lets a team borrow every GPU of the cohort it has no quota for; the
    borrow QOS must then allow the rest of the pool (a QOS without the limit would fall back to the
    association's, resource_limits.html "Hierarchy", and allow no borrowing at all)."""

    def unlimited(config: dict[str, Any]) -> None:
        del config["gpufleet:teams"][0]["borrowingLimit"]

    policy, pools = scheduler_inputs(_spec(tmp_path, unlimited))
    mine = {x.pool: x.borrowable for x in team_limits(policy, pools) if x.team == "vision"}
    assert mine == {"h100": 32 - 16, "l40s": (12 - 4) * 2}


def test_generated_files_carry_the_policy() -> None:
    files = slurm_files(load_stack(ROOT / f"Pulumi.{STACK}.yaml"))
    conf = files["slurm.conf"]
    for line in (
        "PreemptType=preempt/qos",
        "PreemptMode=REQUEUE",
        "PriorityType=priority/multifactor",
        "AccountingStorageEnforce=associations,limits,qos,safe",
        "GresTypes=gpu,shard",
        "SlurmctldHost=slurm-ctl-01",
        "AccountingStorageHost=slurm-db-01",
    ):
        assert line in conf.splitlines(), line
    assert re.search(r"^NodeName=gpu-l40s-01,gpu-l40s-02,gpu-l40s-03 Gres=gpu:l40s:4,shard:8 ", conf, re.M)
    assert re.search(
        r"^PartitionName=h100 Nodes=gpu-h100-01,.*gpu-h100-04 MaxTime=7-00:00:00 DefCpuPerGPU=24 "
        r"DefMemPerGPU=249036 Default=YES",
        conf,
        re.M,
    )
    assert "ConstrainDevices=yes" in files["cgroup.conf"].splitlines()
    gres = files["gres.conf"].splitlines()
    assert sum("Name=shard Count=2" in line for line in gres) == 4  # one line per L40S GPU
    script = files["sacctmgr.sh"]
    qos = "QOS=production,default,preemptible DefaultQOS=default"
    assert f"GrpTRES=gres/gpu=16,gres/gpu:h100=16,gres/shard=8 Fairshare=100 {qos}" in script
    assert "set Fairshare=1 QOS=vision-borrow DefaultQOS=vision-borrow" in script  # the borrow account
    # one QOS per workload priority class, with its value, reclaiming every team's lent GPUs
    assert "modify qos where name=production set Priority=1000 Preempt=vision-borrow,nlp-borrow" in script
    assert "modify qos where name=preemptible set Priority=10 Preempt=vision-borrow,nlp-borrow" in script
    assert "PriorityWeightQOS=100000" in conf.splitlines()


def _documented_keys(page: str) -> set[str]:
    """Option names the installed manual page defines (`.TP` then `\\fBName\\fR`)."""
    path = next(iter(MAN.glob(f"man*/{page}.gz")), None)
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        # Debian's slurm-client carries the 22.05 manual pages (installed as root, like debootstrap)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "slurm-client"],
                       env=env, capture_output=True, check=False, timeout=600)  # fmt: skip
        path = next(iter(MAN.glob(f"man*/{page}.gz")), None)
    if path is None:
        require(f"Slurm's manual page {page} is not installed (apt-get install slurm-client)")
    text = gzip.decompress(path.read_bytes()).decode(errors="replace")
    return {m.lower() for m in re.findall(r"\\fB([A-Za-z]+)\\fR", text)}


@pytest.mark.parametrize("name,page", [("slurm.conf", "slurm.conf.5"), ("gres.conf", "gres.conf.5"),
                                        ("cgroup.conf", "cgroup.conf.5")])  # fmt: skip
def test_every_option_is_in_the_installed_manual(name: str, page: str) -> None:
    """Every key the generated file sets is an option of Slurm's own manual page (Debian 12: 22.05), so a
    misspelt or newer option cannot slip in (slurmctld refuses unknown keys)."""
    documented = _documented_keys(page)
    text = slurm_files(load_stack(ROOT / f"Pulumi.{STACK}.yaml"))[name]
    keys = {k.lower() for line in text.splitlines() if not line.startswith("#")
            for k in re.findall(r"(?:^|\s)([A-Za-z]+)=", line)}  # fmt: skip
    assert keys and keys <= documented, sorted(keys - documented)


def _run_script(tmp_path: Path, reply: str, code: int) -> subprocess.CompletedProcess[str]:
    """The sacctmgr script against a stand-in `sacctmgr` that answers every call with `reply` and `code`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sacctmgr"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\necho '{reply}'\nexit {code}\n")
    fake.chmod(0o755)
    script = tmp_path / "sacctmgr.sh"
    script.write_text(slurm_files(load_stack(ROOT / f"Pulumi.{STACK}.yaml"))["sacctmgr.sh"])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=30)


def test_second_run_of_the_script_is_a_no_op_success(tmp_path: Path) -> None:
    """sacctmgr(1) answers an `add` of what exists and a `modify` that changes nothing with "Nothing new
    added" / "Nothing modified" (and a failing status): a re-run must succeed, through every command."""
    result = _run_script(tmp_path, " Nothing modified", 1)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    # cluster, 2 x 2 borrow QOS, 3 x 2 priority-class QOS, 2 x 4 accounts (each team's own and its borrow account)
    assert all(c.startswith("-i ") for c in calls) and len(calls) == 19


def test_script_stops_on_a_real_failure(tmp_path: Path) -> None:
    result = _run_script(tmp_path, " Problem adding: Unknown option: Fairshar", 1)
    assert result.returncode == 1 and "Unknown option" in result.stderr
    assert len((tmp_path / "calls").read_text().splitlines()) == 1


@pytest.mark.parametrize(
    "edit,expected",
    [
        (lambda c: c["gpufleet:teams"][0].update(lendingLimit=4), "gpufleet:teams[0].lendingLimit"),
        (
            lambda c: c["gpufleet:nodePools"][1].update(gpuModel="H100", sharing="exclusive"),
            "gpufleet:nodePools[1].gpuModel",
        ),
        (lambda c: c["gpufleet:slurm"]["partitions"].update(a100={}), "gpufleet:slurm.partitions.a100"),
        (lambda c: c.pop("gpufleet:slurm"), "gpufleet:slurm: required"),
        (
            lambda c: c["gpufleet:nodePools"][0].update(sharing={"timeSlicing": {"replicas": 2}}),
            "gpufleet:nodePools[1].sharing",
        ),
        (lambda c: c["gpufleet:teams"][0].update(name="root"), "gpufleet:teams[0].name"),
        (
            lambda c: c["gpufleet:nodePools"][0].update(topologyLabels=["rack"]),
            "gpufleet:nodePools[0].topologyLabels",
        ),
    ],
)
def test_what_slurm_cannot_express_is_refused_with_the_key_path(
    tmp_path: Path, edit: Any, expected: str
) -> None:
    assert expected in _problems(tmp_path, edit)


def test_slurm_block_without_the_orchestrator_is_refused(tmp_path: Path) -> None:
    """A Kubernetes stack still needs its kubeconfig (a Slurm one does not), and a `slurm:` block there is a
    mistake, not something to ignore."""
    to_k8s = lambda c: c["gpufleet:cluster"].update(orchestrator="kubernetes")  # noqa: E731
    assert "gpufleet:cluster.kubeconfig" in _problems(tmp_path, to_k8s)
    message = _problems(tmp_path, lambda c: (to_k8s(c), c["gpufleet:cluster"].update(kubeconfig="k.yaml")))
    assert "gpufleet:slurm: only with gpufleet:cluster.orchestrator: slurm" in message


def test_plan_shows_the_accounts_and_a_bad_stack_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_task(capsys, "plan", "--stack", STACK, "--out", str(tmp_path / "plan"))
    assert result.returncode == 0, result.stderr
    assert re.search(
        r"vision\s*│\s*h100\s*│\s*4\s*│\s*gres/gpu:h100\s*│\s*16\s*│\s*vision-borrow\s*│\s*8", result.stdout
    )
    doc = stack_doc(STACK)
    doc["config"]["gpufleet:teams"][1]["lendingLimit"] = 2
    bad = run_task(
        capsys, "plan", "--stack", str(write_stack(tmp_path, "bad", doc)), "--out", str(tmp_path / "b")
    )
    assert bad.returncode == 2 and "gpufleet:teams[1].lendingLimit" in bad.stdout + bad.stderr


def test_plan_of_a_slurm_stack_is_headed_slurm_and_keeps_the_accounts_in_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plan says what runs the jobs (Slurm and select/cons_tres, not a Kubernetes minor and a scheduler
    profile), shows the accounts before saying what it wrote, and writes them in plan.md and plan.json."""
    import json

    result = run_task(capsys, "plan", "--stack", STACK, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    head = result.stdout.splitlines()[0]
    assert "Slurm 22.05 on 7 existing hosts; GPU placement select/cons_tres" in head
    assert "Kubernetes" not in head and "MostAllocated" not in head
    assert result.stdout.index("Slurm accounts and limits") < result.stdout.index("wrote ")
    markdown = (tmp_path / "plan.md").read_text()
    assert (
        "## Slurm accounts and limits" in markdown
        and "| vision | h100 | 4 | gres/gpu:h100 | 16 |" in markdown
    )
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["orchestrator"] == "slurm" and plan["placement"] == "" and plan["slurm_version"] == "22.05"
    assert plan["slurm"][0] == {"account": "vision", "partition": "h100", "nodes": 4, "tres": "gres/gpu:h100",
                                "guaranteed": 16, "borrow_account": "vision-borrow", "borrowable": 8}  # fmt: skip


def test_preflight_on_a_slurm_stack_says_there_is_nothing_to_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No kubeconfig to ask for (a Slurm stack has none) and no AWS account: one ok finding pointing at the dry
    run of `invoke metal`."""
    from infra.preflight import run_preflight

    result = run_task(capsys, "preflight", "--stack", STACK)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kubeconfig" not in result.stdout and "1 check(s) ok" in result.stdout
    [finding] = run_preflight(load_stack(ROOT / f"Pulumi.{STACK}.yaml"))
    assert finding.severity == "ok" and "nothing for preflight to check" in finding.message
    assert "`invoke metal --stack metal-slurm --check` checks the hosts" in finding.message


@pytest.mark.parametrize("command", [["deploy"], ["preview"], ["destroy"], ["destroy", "--yes"], ["outputs"],
                                     ["kubeconfig"], ["deploy", "--kubeconfig", "/nonexistent"]])  # fmt: skip
def test_the_pulumi_lifecycle_refuses_a_slurm_stack_at_once(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the Pulumi CLI, the passphrase or --yes is asked for: a Slurm stack is applied by `invoke metal`."""
    result = run_task(capsys, *command, "--stack", STACK)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: stack 'metal-slurm' runs Slurm (gpufleet:cluster.orchestrator: slurm), which has no Pulumi "
        "resources: apply it with `invoke metal --stack metal-slurm` (docs/slurm.md)"
    )


def test_render_writes_the_slurm_files_and_no_kubernetes_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "manifests"
    result = run_task(capsys, "render", "--stack", STACK, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == [
        "cgroup.conf", "gpufleet-healthcheck", "gres.conf", "job_submit.lua", "sacctmgr.sh", "slurm.conf"]  # fmt: skip
    assert os.access(out / "slurm" / "sacctmgr.sh", os.X_OK)
    assert os.access(out / "slurm" / "gpufleet-healthcheck", os.X_OK)


def test_docs_example_is_the_example_stack() -> None:
    """docs/slurm.md's YAML example is what Pulumi.metal-slurm.yaml says (so it loads and renders)."""
    import yaml

    text = (ROOT / "docs" / "slurm.md").read_text()
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))  # type: ignore[union-attr]
    stack = stack_doc(STACK)["config"]
    for key, value in example.items():
        for sub, item in value.items():
            want = stack[key][sub]
            assert (item.items() <= want.items()) if isinstance(item, dict) else item == want, (key, sub)


def test_usage_on_a_slurm_stack_needs_sacct_and_a_valid_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`invoke usage` on a Slurm stack reads sacct, not Prometheus: without sacct it exits 3 (a missing tool,
    README exit codes) saying what to install; a bad --since is bad input, exit 2, before any command runs."""
    missing = run_task(capsys, "usage", "--stack", STACK, "--sacct", str(tmp_path / "no-sacct"))
    assert missing.returncode == 3, missing
    assert "not found" in missing.stderr and "slurm-client" in missing.stderr, missing.stderr
    bad = run_task(capsys, "usage", "--stack", STACK, "--since", "5x", "--sacct", str(tmp_path / "no-sacct"))
    assert bad.returncode == 2 and "--since" in bad.stderr, bad


def test_sacct_is_asked_for_every_run_truncated_to_the_window() -> None:
    """sacct(1): -D keeps a requeued job's earlier runs, -T truncates each record to [-S, -E], -X one line per
    allocation, -a every user; the window is given in sacct's YYYY-MM-DDTHH:MM:SS local time."""
    from datetime import datetime

    from infra.slurm.usage import SACCT_FIELDS, sacct_argv

    argv = sacct_argv(1_700_000_000, 1_700_003_600, "/opt/slurm/bin/sacct")
    assert argv[0] == "/opt/slurm/bin/sacct" and {"-a", "-X", "-D", "-T", "-P", "-n"} <= set(argv)
    assert argv[argv.index("-S") + 1] == datetime.fromtimestamp(1_700_000_000).strftime("%Y-%m-%dT%H:%M:%S")
    assert argv[-1] == "--format=" + ",".join(SACCT_FIELDS)
