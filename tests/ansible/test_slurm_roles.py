"""A real run of playbooks/slurm-cluster.yml (roles slurm_common, slurm_controller, slurm_node) against three
throwaway Debian 12 hosts (`tests.ansible.slurmhosts`): a controller and two GPU hosts of a small copy of the
metal-slurm stack, each a root with its own network namespace and address, reached over
community.general.chroot. Debian's own packages are installed (Slurm 22.05, MUNGE, MariaDB), and the
daemons the roles start really run (`systemctl` is a stand-in that starts each package's unit).

One cluster serves the module: converge, a second run that changes nothing, jobs as two teams' users, then a
configuration change rolled out on drained nodes while a job runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from tests.ansible import debroot
from tests.ansible.realrun import Run
from tests.ansible.slurmhosts import SlurmHosts, slurm_hosts, write_inventory
from tests.ansible.support import ANSIBLE_DIR, venv_tool
from tests.preflight.helpers import stack_doc, write_stack

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
PLAYBOOK = ANSIBLE_DIR / "playbooks/slurm-cluster.yml"
HEALTHCHECK = "/usr/local/sbin/gpufleet-healthcheck"  # slurm.conf's HealthCheckProgram


def small_stack(tmp: Path) -> ClusterSpec:
    """Pulumi.metal-slurm.yaml with one H100 partition of two hosts of two GPUs (this machine's cores and a
    GiB of memory each), the controller and accounting on one host."""
    doc: dict[str, Any] = stack_doc("metal-slurm")
    config = doc["config"]
    config["gpufleet:slurm"] = {"controllerHosts": ["slurm-ctl-01"], "accountingHost": "slurm-ctl-01",
                                "partitions": {"h100": {"maxTime": "1:00:00", "default": True}}}  # fmt: skip
    h100 = config["gpufleet:nodePools"][0]
    h100.update(hosts=["gpu-h100-01", "gpu-h100-02"], gpusPerNode=2, cpusPerNode=os.cpu_count() or 2,
                memoryGiBPerNode=1)  # fmt: skip
    config["gpufleet:nodePools"] = [h100]
    vision, nlp = config["gpufleet:teams"]
    vision.update(quotas={"h100": 2}, borrowingLimit=2)
    nlp.update(quotas={"h100": 2}, borrowingLimit=2)
    return load_stack(write_stack(tmp, "slurm-roles", doc))


def run_playbook(hosts: SlurmHosts, env: dict[str, str], inventory: Path | None = None, *args: str) -> Run:
    """ansible-playbook in the controller's network namespace (a chroot connection runs every task there;
    the daemons move to their own host's namespace when they start)."""
    start = time.monotonic()
    done = subprocess.run(
        ["ip", "netns", "exec", hosts.controller.netns, venv_tool("ansible-playbook"), "-i",
         str(inventory or hosts.inventory), str(PLAYBOOK), *args],
        env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    return Run(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def recaps(run: Run) -> dict[str, dict[str, int]]:
    found = re.findall(
        r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", run.output, re.M
    )
    assert found, run.output[-3000:]
    return {
        h: dict(zip(("ok", "changed", "unreachable", "failed"), map(int, v), strict=True)) for h, *v in found
    }


@dataclass
class Cluster:
    hosts: SlurmHosts
    spec: ClusterSpec
    work: Path
    env: dict[str, str]
    runs: dict[str, Run] = field(default_factory=dict)

    def sbatch(self, user: str, *args: str, script: str = "sleep 30") -> int:
        out = self.hosts.controller.run("sh", "-c", f"cd /home/{user} && sbatch --parsable {' '.join(args)} "
                                        f"--wrap {script!r}", user=user)  # fmt: skip
        return int(out.strip().splitlines()[-1].split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        out = self.hosts.controller.run("scontrol", "-o", "show", "job", str(job_id))
        return dict(w.split("=", 1) for w in out.split() if "=" in w)

    def wait(self, what: str, test: Callable[[], bool], timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if test():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.hosts.logs()}")

    def wait_state(self, job_id: int, *states: str, timeout: float = 60) -> dict[str, str]:
        self.wait(f"job {job_id} in {states}", lambda: self.job(job_id)["JobState"] in states, timeout)
        return self.job(job_id)

    def nodes(self) -> dict[str, str]:
        out = self.hosts.controller.run("sinfo", "-h", "-N", "-o", "%N %t")
        return dict(line.split() for line in out.splitlines() if line.strip())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, ansible_env: dict[str, str]) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.fail("the real Slurm role run needs root (debootstrap, chroot, mount, network namespaces)")
    work = tmp_path_factory.mktemp("slurm-hosts")
    spec = small_stack(work)
    try:
        with slurm_hosts(spec, work) as hosts:
            made = Cluster(hosts, spec, work, ansible_env)
            made.runs["converge"] = run_playbook(hosts, ansible_env)
            if made.runs["converge"].returncode == 0:
                made.runs["again"] = run_playbook(hosts, ansible_env)
            print("\nslurm roles: " + ", ".join(f"{n} {r.seconds:.1f}s" for n, r in made.runs.items()))
            yield made
    except (debroot.HostToolMissing, debroot.RootBuildFailed) as missing:
        pytest.fail(str(missing))


def test_the_roles_converge_and_a_second_run_changes_nothing(cluster: Cluster) -> None:
    """Idempotence: every task of the second run reports ok, none changed, on all three hosts."""
    converge = cluster.runs["converge"]
    assert converge.returncode == 0, converge.output[-6000:] + cluster.hosts.logs()
    again = cluster.runs["again"]
    assert again.returncode == 0, again.output[-6000:]
    assert set(recaps(again)) == {"slurm-ctl-01", "gpu-h100-01", "gpu-h100-02"}
    changed = {h: r["changed"] for h, r in recaps(again).items() if r["changed"]}
    assert not changed, again.output[-6000:]


def test_every_host_has_the_controllers_munge_key_and_the_rendered_config(cluster: Cluster) -> None:
    """quickstart_admin.html: "all nodes in your cluster have the same munge.key" (each munge package made
    its own); slurm.conf(5): the same slurm.conf everywhere, here the renderer's text unchanged; SlurmUser has
    one UID everywhere (slurmdbd trusts only it and root). Each GPU host has slurm.conf's HealthCheckProgram, the
    rendered script, mode 0755, and it finds the host healthy as slurmd runs it (SLURMD_NODENAME only)."""
    assert {h.run("id", "-u", "slurm").strip() for h in cluster.hosts.hosts} == {"64030"}
    keys = {h.name: (h.root / "etc/munge/munge.key").read_bytes() for h in cluster.hosts.hosts}
    assert len(set(keys.values())) == 1, "hosts have different MUNGE keys"
    rendered = (cluster.hosts.config / "slurm.conf").read_text().rstrip("\n")
    for host in cluster.hosts.hosts:
        assert host.read("/etc/slurm/slurm.conf").rstrip("\n") == rendered
        assert host.read("/etc/slurm/gres.conf").rstrip("\n") == (
            cluster.hosts.config / "gres.conf"
        ).read_text().rstrip("\n")
    # slurm.conf's HealthCheckProgram on each GPU host, as rendered; healthy with the stand-in GPUs (exit 0)
    for host in cluster.hosts.nodes:
        assert host.read(HEALTHCHECK) == (cluster.hosts.config / "gpufleet-healthcheck").read_text()
        assert host.run("stat", "-c", "%a %U", HEALTHCHECK).split() == ["755", "root"]
        assert host.run("env", "-i", f"SLURMD_NODENAME={host.name}", HEALTHCHECK) == ""
    # a credential made on a GPU host decodes on the controller: one key, and munged runs on both
    token = cluster.hosts.nodes[0].run("munge", "-n")
    assert "STATUS:          Success" in subprocess.run(
        ["ip", "netns", "exec", cluster.hosts.controller.netns, "chroot", str(cluster.hosts.controller.root),
         "unmunge"], input=token, capture_output=True, text=True, check=False).stdout  # fmt: skip


def test_the_daemons_run_and_the_nodes_register_idle(cluster: Cluster) -> None:
    """slurmctld and slurmdbd on the controller, slurmd on each GPU host with the stand-in GPUs (gres.conf
    File=/dev/nvidia[0-1]): sinfo lists both nodes idle, each with its 2 H100 GRES."""
    cluster.wait(
        "both nodes idle", lambda: set(cluster.nodes().values()) == {"idle"} and len(cluster.nodes()) == 2
    )
    gres = cluster.hosts.controller.run("sinfo", "-h", "-N", "-o", "%N %G")
    assert sorted(gres.split("\n")[:2]) == ["gpu-h100-01 gpu:h100:2", "gpu-h100-02 gpu:h100:2"], gres


def test_the_teams_groups_are_users_of_their_accounts(cluster: Cluster) -> None:
    """The rendered sacctmgr script adds the members of each team's `groups` (primary and supplementary:
    getent) as users of the team's account and its borrow account; the account carries the guaranteed GrpTRES,
    typed and untyped."""
    out = cluster.hosts.controller.run("sacctmgr", "-nP", "show", "assoc", "format=account,user,grptres")
    rows = {tuple(line.split("|")[:2]): line.split("|")[2] for line in out.splitlines()}
    assert {("vision", "alice"), ("vision", "carol"), ("nlp", "bob")} <= set(rows), out
    assert {("vision-borrow", "alice"), ("vision-borrow", "carol"), ("nlp-borrow", "bob")} <= set(rows), out
    assert ("nlp", "alice") not in rows
    assert set(rows[("vision", "")].split(",")) == {"gres/gpu=2", "gres/gpu:h100=2"}


def test_jobs_as_team_users_within_quota_run_beyond_it_pend(cluster: Cluster) -> None:
    """resource_limits.html GrpTRES: alice's 2 H100s run and see only their GPUs (CUDA_VISIBLE_DEVICES from
    the GRES, ConstrainDevices); a third GPU for vision pends with AssocGrpGRES; bob's (nlp) job runs on the
    other node; sacct records GPUs per account."""
    first = cluster.sbatch("alice", "--gres=gpu:h100:2", "-p", "h100",
                           script="env | grep -E ^CUDA_VISIBLE_DEVICES=; sleep 12")  # fmt: skip
    ran = cluster.wait_state(first, "RUNNING", "COMPLETED")
    assert ran["TRES"].endswith("gres/gpu:h100=2") and ran["Account"] == "vision", ran
    beyond = cluster.sbatch("alice", "--gres=gpu:h100:1", "-p", "h100")
    other = cluster.sbatch("bob", "--gres=gpu:h100:2", "-p", "h100", script="sleep 2")
    cluster.wait("a reason for the pending job", lambda: cluster.job(beyond)["Reason"] != "None", timeout=10)
    job = cluster.job(beyond)
    assert (job["JobState"], job["Reason"]) == ("PENDING", "AssocGrpGRES"), job
    assert cluster.job(first)["JobState"] == "RUNNING"  # still holding vision's two GPUs
    cluster.hosts.controller.run("scancel", str(beyond))
    done = cluster.wait_state(first, "COMPLETED")
    cluster.wait_state(other, "COMPLETED")
    node = next(h for h in cluster.hosts.nodes if h.name == done["NodeList"])
    assert "CUDA_VISIBLE_DEVICES=0,1" in node.read(f"/home/alice/slurm-{first}.out").splitlines()
    sacct = lambda: cluster.hosts.controller.run(  # noqa: E731
        "sacct", "-nXP", "-a", "-j", f"{first},{other}", "--format=jobid,account,user,alloctres"
    )
    cluster.wait("sacct records", lambda: sacct().count("gres/gpu:h100=2") == 2)
    rows = {line.split("|")[0]: line.split("|")[1:3] for line in sacct().splitlines()}
    assert rows[str(first)] == ["vision", "alice"] and rows[str(other)] == ["nlp", "bob"], rows


def test_a_user_sees_only_their_own_jobs(cluster: Cluster) -> None:
    """slurm.conf(5) PrivateData=jobs,usage: squeue shows bob (nlp) none of alice's (vision) jobs, alice her own;
    root sees every job."""
    job = cluster.sbatch("alice", "--gres=gpu:h100:1", "-p", "h100", script="sleep 60")
    cluster.wait_state(job, "RUNNING")
    ids = {who: cluster.hosts.controller.run("squeue", "-h", "-o", "%i", user=who).split()
           for who in ("alice", "bob", "root")}  # fmt: skip
    assert str(job) in ids["alice"] and str(job) in ids["root"] and str(job) not in ids["bob"], ids
    cluster.hosts.controller.run("scancel", str(job))


def test_ssh_reaches_a_gpu_node_only_into_a_job_of_ones_own(cluster: Cluster) -> None:
    """pam_slurm_adopt in sshd's account stack (pam_slurm_adopt.html), tried with pamtester on gpu-h100-01: carol
    is refused while she has no job there, and let in once her job runs there (into it: PrologFlags=Contain
    made its extern step); root is let in without a job."""
    node = next(h for h in cluster.hosts.nodes if h.name == "gpu-h100-01")
    refused = node.run("pamtester", "sshd", "carol", "acct_mgmt", check=False)
    assert "account management done" not in refused and "Permission denied" in refused, refused
    assert "account management done" in node.run("pamtester", "sshd", "root", "acct_mgmt")
    job = cluster.sbatch("carol", "--gres=gpu:h100:1", "-p", "h100", "-w", node.name, script="sleep 120")
    cluster.wait_state(job, "RUNNING")
    assert "account management done" in node.run("pamtester", "sshd", "carol", "acct_mgmt")
    cluster.hosts.controller.run("scancel", str(job))
    cluster.wait_state(job, "CANCELLED")


def task_output(run: Run, task: str) -> str:
    """What the run printed for one task (each TASK header up to the next one: a task runs once per batch of
    hosts); empty when it did not run."""
    parts = run.output.split("TASK [")
    return "".join(part for part in parts if part.startswith(f"{task}]"))


ADMIN_REASON = "bad GPU, RMA"


def test_a_slurm_conf_change_restarts_slurmd_in_place_and_keeps_an_admins_drain(cluster: Cluster) -> None:
    """A changed slurm.conf: slurmctld restarts first (its play runs before the nodes'), then each slurmd
    restarts in place, jobs running (quickstart_admin.html: slurmd may be restarted while jobs run): bob's job
    keeps running, unrequeued, and its node is never drained. gpu-h100-02, drained by an admin for a bad GPU
    before the run, keeps its state and reason. A run after that changes nothing."""
    job = cluster.sbatch("bob", "--gres=gpu:h100:1", "-p", "h100", "-w", "gpu-h100-01", script="sleep 600")
    cluster.wait_state(job, "RUNNING")
    cluster.hosts.controller.run("scontrol", "update", "NodeName=gpu-h100-02", "State=DRAIN",
                                 f"Reason={ADMIN_REASON}")  # fmt: skip
    changed = write_inventory(cluster.hosts, cluster.spec, cluster.work,
                              extra={"slurm_common_local_config": {"MessageTimeout": "20"}})  # fmt: skip
    rollout = run_playbook(cluster.hosts, cluster.env, changed)
    assert rollout.returncode == 0, rollout.output[-6000:] + cluster.hosts.logs()
    out = rollout.output
    assert out.index("Start slurmctld, restarted when the configuration changed") < out.index(
        "Restart slurmd with the new configuration"
    )
    assert "changed:" not in task_output(rollout, "slurm_node : Drain the node"), out[-6000:]
    assert "changed:" not in task_output(rollout, "slurm_node : Resume the node it drained")
    assert re.search(
        r"changed: \[gpu-h100-01\]",
        task_output(rollout, "slurm_node : Restart slurmd with the new configuration"),
    )
    running = cluster.job(job)
    assert (running["JobState"], running["Restarts"]) == ("RUNNING", "0"), running
    assert cluster.nodes()["gpu-h100-01"] in ("mix", "alloc"), cluster.nodes()
    assert "MessageTimeout=20" in cluster.hosts.nodes[0].read("/etc/slurm/slurm.conf")
    _assert_admin_drain_kept(cluster)
    cluster.hosts.controller.run("scancel", str(job))
    again = run_playbook(cluster.hosts, cluster.env, changed)
    assert again.returncode == 0 and not any(r["changed"] for r in recaps(again).values()), again.output[
        -4000:
    ]


def _assert_admin_drain_kept(cluster: Cluster) -> None:
    node = cluster.hosts.controller.run("scontrol", "-o", "show", "node", "gpu-h100-02")
    assert "DRAIN" in node.split("State=", 1)[1].split()[0] and f"Reason={ADMIN_REASON} [" in node, node


def test_a_gres_conf_change_waits_for_the_nodes_jobs_on_a_drained_node(cluster: Cluster) -> None:
    """A changed gres.conf (the devices jobs are given) is applied on a drained node: gpu-h100-01 is drained, its
    running job finishes, slurmd restarts and the node resumes; gpu-h100-02, which an admin drained, waits
    with its reason and is not resumed. A run after that changes nothing."""
    job = cluster.sbatch("bob", "--gres=gpu:h100:1", "-p", "h100", "-w", "gpu-h100-01", script="sleep 15")
    cluster.wait_state(job, "RUNNING")
    gres = cluster.hosts.config / "gres.conf"
    gres.write_text(gres.read_text() + "# a comment: the file changed\n")
    inventory = write_inventory(cluster.hosts, cluster.spec, cluster.work,
                                extra={"slurm_common_local_config": {"MessageTimeout": "20"}})  # fmt: skip
    rollout = run_playbook(cluster.hosts, cluster.env, inventory)
    assert rollout.returncode == 0, rollout.output[-6000:] + cluster.hosts.logs()
    drained = task_output(rollout, "slurm_node : Drain the node")
    assert "changed: [gpu-h100-01]" in drained and "changed: [gpu-h100-02]" not in drained, drained
    finished = cluster.wait_state(job, "COMPLETED", "FAILED", "CANCELLED", timeout=30)
    assert (finished["JobState"], finished["ExitCode"]) == ("COMPLETED", "0:0"), finished
    cluster.wait("gpu-h100-01 idle", lambda: cluster.nodes()["gpu-h100-01"] == "idle")
    _assert_admin_drain_kept(cluster)
    cluster.hosts.controller.run("scontrol", "update", "NodeName=gpu-h100-02", "State=RESUME")
    again = run_playbook(cluster.hosts, cluster.env, inventory)
    assert again.returncode == 0 and not any(r["changed"] for r in recaps(again).values()), again.output[
        -4000:
    ]


def test_check_diff_never_prints_the_database_password(cluster: Cluster) -> None:
    """`invoke metal --check` runs the playbook with --check --diff: a new database password changes
    slurmdbd.conf, and neither its diff nor any other output shows the password (nor a StoragePass line)."""
    password = "gpufleet-" + os.urandom(6).hex()
    inventory = write_inventory(cluster.hosts, cluster.spec, cluster.work,
                                extra={"slurm_common_local_config": {"MessageTimeout": "20"},
                                       "slurm_controller_db_password": password})  # fmt: skip
    check = run_playbook(cluster.hosts, cluster.env, inventory, "--check", "--diff")
    assert check.returncode == 0, check.output[-6000:]
    assert "Install slurmdbd.conf" in check.output
    assert password not in check.output and "StoragePass" not in check.output, check.output[-6000:]
