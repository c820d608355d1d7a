"""The Slurm twin: a real Slurm cluster of the stack on loopback (`invoke twin` for a Slurm stack, and the
tests): munged, MariaDB, slurmdbd, slurmctld and one slurmd per GPU host (Debian's slurmd is built with
--enable-multiple-slurmd: `slurmd -N NAME`, each on its own port), all in one folder and all on 127.0.0.1,
with the configuration the project renders. GPUs are stand-in device files (the NVIDIA major) where the
machine has none; the stack's cores and memory are what the nodes report (`SlurmdParameters=config_overrides`).

Only what is local to this throwaway cluster is set on top of the rendered slurm.conf (`LOCAL_KEYS`: paths,
ports, the daemons' user, where munged listens; no periodic health check, whose GPUs would be this machine's);
every policy line is the renderer's, unchanged.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from infra.errors import CheckFailed, ToolMissing
from infra.scheduling import scheduler_inputs
from infra.slurm.site import slurm_site
from infra.spec import ClusterSpec
from scheduler.slurm import (
    borrow_account,
    cgroup_conf,
    gres_conf,
    job_submit_lua,
    sacctmgr_script,
    slurm_conf,
)
from twin.processes import with_parent_death

# Debian 12 packages, and one binary of each that says whether it is installed (Slurm 22.05, MUNGE, MariaDB)
PACKAGES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "slurmdbd": "slurmdbd", "munged": "munge",
            "mariadbd": "mariadb-server", "sbatch": "slurm-client"}  # fmt: skip
LOOPBACK = "127.0.0.1"
# Keys set on top of the rendered slurm.conf for a cluster in a temporary folder (slurm.conf(5)); nothing else.
LOCAL_KEYS = ("StateSaveLocation", "SlurmdSpoolDir", "SlurmUser", "SlurmctldPidFile", "SlurmdPidFile",
              "SlurmctldLogFile", "SlurmdLogFile", "SlurmctldPort", "AccountingStoragePort", "AuthInfo",
              "AccountingStoragePass", "SlurmdParameters", "ReturnToService",
              "HealthCheckInterval")  # fmt: skip
NVIDIA_MAJOR = 195  # the character-device major of /dev/nvidiaN


class SlurmTwinFailed(CheckFailed):
    """A daemon of the twin exited or did not come up, or a command in it failed: the message has its logs."""


def slurm_path() -> str:
    return os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def override(conf: str, values: dict[str, str]) -> str:
    """slurm.conf with `values` (only `LOCAL_KEYS`) replacing the rendered lines of those keys or appended."""
    assert set(values) <= set(LOCAL_KEYS), sorted(set(values) - set(LOCAL_KEYS))
    lines = [ln for ln in conf.splitlines() if ln.split("=", 1)[0] not in values]
    return "\n".join([*lines, *(f"{k}={v}" for k, v in values.items())]) + "\n"


@dataclass
class SlurmCluster:
    spec: ClusterSpec
    root: Path
    hosts: list[str]
    gpus: dict[str, int]  # host -> GPUs (stand-in device files)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    devices: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    script: Path | None = None
    # the nodes report the stack's cores and memory (SlurmdParameters=config_overrides), not this machine's
    stack_hardware: bool = True
    # gres.conf lines of the hosts' own, after the rendered ones (a MIG host's instances: roles/slurm_common)
    host_gres: tuple[str, ...] = ()

    # -- commands --------------------------------------------------------------------------------------
    def run(
        self, *argv: str, check: bool = True, timeout: float = 30, env: dict[str, str] | None = None
    ) -> str:
        done = subprocess.run(
            argv,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise SlurmTwinFailed(f"{' '.join(argv)}: {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done.stdout + done.stderr

    def sbatch(self, *args: str, script: str = "sleep 60") -> int:
        out = self.run("sbatch", "--parsable", "--chdir", str(self.root / "jobs"),
                       "--output", str(self.root / "jobs" / "%j.out"), *args, "--wrap", script)  # fmt: skip
        return int(out.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job`'s fields (State, Reason, Restarts, TRES, ...)."""
        out = self.run("scontrol", "-o", "show", "job", str(job_id))
        return dict(w.split("=", 1) for w in out.split() if "=" in w)

    def wait(self, what: str, test: Callable[[], bool], timeout: float = 40) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if test():
                return
            time.sleep(0.5)
        raise SlurmTwinFailed(f"timed out after {timeout}s waiting for {what}\n{self.logs()}")

    def wait_state(self, job_id: int, *states: str, timeout: float = 40) -> dict[str, str]:
        self.wait(f"job {job_id} in {states}", lambda: self.job(job_id)["JobState"] in states, timeout)
        return self.job(job_id)

    def logs(self) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*")):
            out.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    # -- start and stop -----------------------------------------------------------------------------------
    def _spawn(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.root / "log" / f"{Path(argv[0]).name}-{len(self.procs)}.out", "wb")  # noqa: SIM115
        proc = subprocess.Popen(with_parent_death(argv), stdout=log, stderr=subprocess.STDOUT, env=env or self.env,
                                start_new_session=True)  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def _until(self, what: str, test: Callable[[], bool], timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if test():
                return
            for p in self.procs:
                if p.poll() is not None:
                    args = list(p.args) if isinstance(p.args, list) else [str(p.args)]
                    name = Path(str(args[args.index("--") + 1] if "--" in args else args[0])).name
                    raise SlurmTwinFailed(f"{name} exited ({p.returncode}) before {what}\n{self.logs()}")
            time.sleep(0.3)
        raise SlurmTwinFailed(f"timed out waiting for {what}\n{self.logs()}")

    def _ok(self, *argv: str) -> bool:
        return (
            subprocess.run(argv, env=self.env, capture_output=True, check=False, timeout=20).returncode == 0
        )

    def start(self) -> None:
        r = self.root
        for sub in ("etc", "log", "run", "state", "spool", "db", "jobs", "munge"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        ports = {"ctld": free_port(), "dbd": free_port(), "mysql": free_port()}
        node_ports = {h: free_port() for h in self.hosts}
        for host in self.hosts:
            (r / "spool" / host).mkdir(exist_ok=True)
        self.env = {**os.environ, "PATH": slurm_path(), "SLURM_CONF": str(r / "etc" / "slurm.conf")}

        # munged with a key of this test only (munged(8) --force: run as root)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = r / "munge" / "munge.socket"
        self._spawn("munged", "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                    f"--pid-file={r / 'munge' / 'munged.pid'}", f"--seed-file={r / 'munge' / 'seed'}",
                    f"--log-file={r / 'log' / 'munged.log'}", "--num-threads=2")  # fmt: skip
        self._until("munged's socket", sock.exists)

        # MariaDB in its own datadir, on loopback, without grant tables (nothing but this test reaches it)
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={r / 'db'}", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        self._spawn("mariadbd", "--no-defaults", f"--datadir={r / 'db'}", f"--socket={r / 'run' / 'mysql.sock'}",
                    f"--port={ports['mysql']}", f"--bind-address={LOOPBACK}", "--user=root",
                    f"--pid-file={r / 'run' / 'mysqld.pid'}", "--skip-grant-tables",
                    "--innodb-buffer-pool-size=32M", f"--log-error={r / 'log' / 'mysqld.log'}")  # fmt: skip
        self._until("MariaDB", lambda: _listening(ports["mysql"]))

        # every daemon runs on this machine: the controller and accounting host are `localhost` (slurmctld and
        # slurmdbd accept it as any host's name), the nodes are loopback ports
        site = replace(slurm_site(self.spec), controller_hosts=("localhost",), accounting_host="localhost",
                       node_addresses=dict.fromkeys(self.hosts, LOOPBACK), node_ports=node_ports)  # fmt: skip
        policy, pools = scheduler_inputs(self.spec)
        auth = f"socket={sock}"
        conf = override(slurm_conf(site, policy, pools), {
            "StateSaveLocation": str(r / "state"), "SlurmdSpoolDir": str(r / "spool" / "%n"),
            "SlurmUser": "root", "SlurmctldPidFile": str(r / "run" / "slurmctld.pid"),
            "SlurmdPidFile": str(r / "run" / "slurmd-%n.pid"), "SlurmctldLogFile": str(r / "log" / "slurmctld.log"),
            "SlurmdLogFile": str(r / "log" / "slurmd-%n.log"), "SlurmctldPort": str(ports["ctld"]),
            "AccountingStoragePort": str(ports["dbd"]), "AuthInfo": auth,
            # the munged that slurmdbd traffic is signed with (slurm.conf(5) AccountingStoragePass)
            "AccountingStoragePass": str(sock),
            "ReturnToService": "2",
            # the nodes are stand-ins on one machine whose GPUs, if any, are not the stack's: slurmd runs no
            # health check (it would drain them), and none reaches a real cluster's controller from here; the
            # tests run gpufleet-healthcheck per node as slurmd would
            "HealthCheckInterval": "0",
            # the stand-in hosts have this machine's cores and memory, not the stack's (slurm.conf(5))
            **({"SlurmdParameters": "config_overrides"} if self.stack_hardware else {}),
        })  # fmt: skip
        (r / "etc" / "slurm.conf").write_text(conf)
        (r / "etc" / "gres.conf").write_text(
            gres_conf(site, pools) + "".join(f"{ln}\n" for ln in self.host_gres)
        )
        (r / "etc" / "cgroup.conf").write_text(cgroup_conf(site))
        (r / "etc" / "job_submit.lua").write_text(job_submit_lua(site, pools))
        self.script = r / "etc" / "sacctmgr.sh"
        self.script.write_text(sacctmgr_script(site, policy, pools))
        dbd = r / "etc" / "slurmdbd.conf"
        dbd.write_text("\n".join([
            "AuthType=auth/munge", f"AuthInfo={auth}", f"DbdHost={site.accounting_host}", f"DbdAddr={LOOPBACK}",
            f"DbdPort={ports['dbd']}", "SlurmUser=root", f"PidFile={r / 'run' / 'slurmdbd.pid'}",
            f"LogFile={r / 'log' / 'slurmdbd.log'}", "StorageType=accounting_storage/mysql",
            f"StorageHost={LOOPBACK}", f"StoragePort={ports['mysql']}", "StorageUser=root",
            "StorageLoc=slurm_acct_db", ""]))  # fmt: skip
        dbd.chmod(0o600)

        # stand-in GPUs: character devices with the NVIDIA major, only those that do not exist yet
        for n in range(max(self.gpus.values())):
            dev = Path(f"/dev/nvidia{n}")
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, n))
                self.devices.append(dev)

        self._spawn("slurmdbd", "-D")  # reads slurmdbd.conf next to $SLURM_CONF
        self._until("slurmdbd", lambda: _listening(ports["dbd"]))
        # the cluster must exist in the database before slurmctld registers (sacctmgr(1) add cluster)
        added = self.run("sacctmgr", "-i", "add", "cluster", site.cluster_name, check=False)
        if "Adding Cluster" not in added and "already exists" not in added:
            raise SlurmTwinFailed(f"sacctmgr add cluster {site.cluster_name}: {added}")
        self._spawn("slurmctld", "-D", "-i")
        self._until("slurmctld", lambda: self._ok("scontrol", "ping"))
        for host in self.hosts:
            self._spawn("slurmd", "-D", "-N", host)
        self._until("every node idle", self._nodes_idle, timeout=60)

    def _nodes_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True,
                             text=True, check=False).stdout  # fmt: skip
        states = dict(line.split() for line in out.splitlines() if line.strip())
        return set(states) == set(self.hosts) and all(s == "idle" for s in states.values())

    def stop(self) -> None:
        """Cancel the jobs, then end every daemon and remove the stand-in devices, also when the jobs cannot be
        cancelled (slurmctld never came up: squeue only ever prints its error)."""
        try:
            if self.env and self.procs and self.procs[-1].poll() is None:
                users = set(self.run("squeue", "-h", "-o", "%u", check=False).split()) | {"root"}
                for user in sorted(users):  # every user's jobs: tests submit as members too
                    self.run("scancel", "--full", f"--user={user}", check=False)
                self.wait(
                    "no job left", lambda: not self.run("squeue", "-h", check=False).strip(), timeout=20
                )
        finally:
            self._end_daemons()

    def _end_daemons(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        for dev in self.devices:
            dev.unlink(missing_ok=True)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


def _hosts(spec: ClusterSpec) -> tuple[list[str], dict[str, int]]:
    """Every GPU host of the stack's pools and its GPUs (checked present on the existing platform)."""
    hosts = [h for p in spec.node_pools for h in (p.hosts or ())]
    return hosts, {h: p.gpus_per_node or 0 for p in spec.node_pools for h in (p.hosts or ())}


@contextmanager
def slurm_cluster(
    spec: ClusterSpec, root: Path, stack_hardware: bool = True, host_gres: tuple[str, ...] = ()
) -> Iterator[SlurmCluster]:
    """The stack's cluster, stopped on exit. `stack_hardware=False`: the nodes report this machine's cores and
    memory, and slurmctld checks them against the rendered NodeName lines as it would on real hosts.
    `host_gres`: gres.conf lines the hosts add to the rendered ones (a MIG host's instances)."""
    hosts, gpus = _hosts(spec)
    cluster = SlurmCluster(spec=spec, root=root, hosts=hosts, gpus=gpus, stack_hardware=stack_hardware,
                           host_gres=host_gres)  # fmt: skip
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


# ---- `invoke twin` for a Slurm stack -------------------------------------------------------------------------


def missing_packages() -> list[str]:
    """The Debian packages whose daemons or clients are not installed here."""
    return sorted({pkg for tool, pkg in PACKAGES.items() if shutil.which(tool, path=slurm_path()) is None})


def check_twin_prerequisites() -> None:
    """Exit 3 before anything starts: the daemons come from the distribution's packages, and munged, the
    stand-in GPU device files and slurmd's cgroups need root."""
    missing = missing_packages()
    if missing:
        raise ToolMissing(
            f"the Slurm twin runs Debian's Slurm, MUNGE and MariaDB: apt-get install {' '.join(missing)}"
        )
    if os.geteuid() != 0:
        raise ToolMissing(
            "the Slurm twin needs root (munged, slurmd's cgroups, stand-in /dev/nvidiaN devices)"
        )


def start_twin(spec: ClusterSpec, folder: Path) -> SlurmCluster:
    """The stack's Slurm cluster on loopback with its accounts applied; the invoking user is added to every
    team's accounts so that `sbatch --account=TEAM` (and `TEAM-borrow`) works from `--run`."""
    check_twin_prerequisites()
    shutil.rmtree(folder, ignore_errors=True)
    hosts, gpus = _hosts(spec)
    cluster = SlurmCluster(spec=spec, root=folder, hosts=hosts, gpus=gpus)
    try:
        cluster.start()
        assert cluster.script is not None
        cluster.run("sh", str(cluster.script), timeout=120)
        me = pwd.getpwuid(os.getuid()).pw_name
        teams = ",".join(a for t in spec.teams for a in (t.name, borrow_account(t.name)))
        if teams:
            cluster.run("sacctmgr", "-i", "add", "user", me, f"account={teams}", check=False)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def twin_environment(cluster: SlurmCluster) -> dict[str, str]:
    """Where `sbatch`, `squeue`, `sacct` reach the twin's controller: its slurm.conf (SLURM_CONF)."""
    return {**cluster.env}
