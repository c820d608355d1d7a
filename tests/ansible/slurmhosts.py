"""Three throwaway Debian 12 hosts for a real run of playbooks/slurm-cluster.yml: a controller (slurmctld,
slurmdbd, MariaDB) and two GPU hosts, each a root of its own (the cached debootstrap tarball of `debroot`,
with Debian's Slurm, MUNGE and MariaDB packages in its apt cache) with a network namespace of its own.

The namespaces are joined by a bridge in the controller's namespace, on a private /24 that exists only
inside them (the machine's own network is never reached); /etc/hosts in each root names the three hosts.
No systemd runs in a root: `systemd_standin.py` is its `systemctl`, and starts each daemon from the unit file
its package installed, in its host's network namespace and with its host's name. The GPU hosts get stand-in
GPUs: character devices with the NVIDIA major (195), as the driver creates them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from infra.slurm.files import render_slurm, slurm_inventory
from infra.spec import ClusterSpec
from tests.ansible import debroot

# What the roles install from Debian (vars/Debian.yml of slurm_common, slurm_controller, slurm_node), and what
# a GPU host has before them (SSH_HOST_PACKAGES: sshd's PAM stack, and pamtester to try it).
PACKAGES = ("munge", "slurm-client", "slurmctld", "slurmdbd", "slurmd", "mariadb-server", "mariadb-client",
            "libpam-slurm-adopt", "openssh-server", "pamtester")  # fmt: skip
SSH_HOST_PACKAGES = ("openssh-server", "pamtester")
SUBNET = "10.199.0"
NVIDIA_MAJOR = 195
STANDIN = Path(__file__).with_name("systemd_standin.py")
# The people: two teams' Unix groups as a directory service would give them, the same ids on every host.
GROUPS = {"vision-team": 2001, "nlp-team": 2002}
USERS = {
    "alice": (2001, "vision-team", ()),
    "bob": (2002, "nlp-team", ()),
    "carol": (2003, None, ("vision-team",)),
}
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


@dataclass
class Host:
    name: str
    address: str
    root: Path
    netns: str
    gpus: int = 0

    def run(self, *argv: str, user: str = "", check: bool = True, timeout: float = 60) -> str:
        """A command on this host: in its network namespace, in its root, as `user` (default root)."""
        who = ["runuser", "-u", user, "--"] if user else []
        done = subprocess.run(
            ["ip", "netns", "exec", self.netns, "chroot", str(self.root), *who, *argv],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{self.name}: {' '.join(argv)}: {done.returncode}\n{done.stdout}{done.stderr}"
            )
        return done.stdout + done.stderr

    def read(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text(errors="replace")


@dataclass
class SlurmHosts:
    controller: Host
    nodes: list[Host]
    config: Path  # the folder render_slurm wrote
    inventory: Path
    mounts: list[Path] = field(default_factory=list)

    @property
    def hosts(self) -> list[Host]:
        return [self.controller, *self.nodes]

    def logs(self) -> str:
        out = []
        for host in self.hosts:
            for log in sorted((host.root / "var/log/gpufleet-systemd").glob("*.log")):
                out.append(
                    f"--- {host.name} {log.name}\n"
                    + "\n".join(log.read_text(errors="replace").splitlines()[-12:])
                )
            for log in sorted((host.root / "var/log/slurm").glob("*.log")):
                out.append(
                    f"--- {host.name} {log.name}\n"
                    + "\n".join(log.read_text(errors="replace").splitlines()[-12:])
                )
        return "\n".join(out)


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


def _network(prefix: str, names: list[str]) -> list[str]:
    """One namespace per host; a bridge in the first joins the others by veth pairs."""
    spaces = [f"{prefix}-{i}" for i in range(len(names))]
    for ns in spaces:
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
    hub = spaces[0]
    _ip("-n", hub, "link", "add", "br0", "type", "bridge")
    _ip("-n", hub, "addr", "add", f"{SUBNET}.1/24", "dev", "br0")
    _ip("-n", hub, "link", "set", "br0", "up")
    for i, ns in enumerate(spaces[1:], start=1):
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"port{i}", "netns", hub)
        _ip("-n", hub, "link", "set", f"port{i}", "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
    return spaces


def _chroot(root: Path, *argv: str) -> None:
    subprocess.run(["chroot", str(root), *argv], check=True, capture_output=True, env=ENV)


def _prepare(host: Host, tarball: Path, all_hosts: list[Host], stack: ExitStack, mounts: list[Path]) -> None:
    root = host.root
    root.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3g,mode=0755", "gpufleet-slurm", str(root)], check=True
    )
    mounts.append(root)
    debroot.extract(tarball, root)
    policy = root / "usr/sbin/policy-rc.d"  # packages never start their services on install; the roles do
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    systemctl = root / "usr/local/sbin/systemctl"
    shutil.copy(STANDIN, systemctl)
    systemctl.chmod(0o755)
    (root / "etc/hostname").write_text(host.name + "\n")
    lines = [f"{h.address}\t{h.name}" for h in all_hosts]
    (root / "etc/hosts").write_text("127.0.0.1\tlocalhost\n" + "\n".join(lines) + "\n")
    for group, gid in GROUPS.items():
        _chroot(root, "groupadd", "-g", str(gid), group)
    for user, (uid, primary, extra) in USERS.items():
        argv = ["useradd", "-m", "-u", str(uid)]
        argv += ["-g", primary] if primary else ["-U"]
        argv += ["-G", ",".join(extra)] if extra else []
        _chroot(root, *argv, user)
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    mounts.append(root / "proc")
    netns = root / "run/gpufleet-netns"
    netns.touch()
    subprocess.run(["mount", "--bind", f"/run/netns/{host.netns}", str(netns)], check=True)
    mounts.append(netns)
    cgroup = root / "sys/fs/cgroup"
    cgroup.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--rbind", "/sys/fs/cgroup", str(cgroup)], check=True)
    subprocess.run(["mount", "--make-rslave", str(cgroup)], check=True)
    mounts.append(cgroup)
    for n in range(host.gpus):
        os.mknod(root / f"dev/nvidia{n}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, n))
    if host.gpus:  # a GPU host has sshd, as real ones do (from the root's apt cache: no network)
        _chroot(root, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "--no-download",
                "--no-install-recommends", *SSH_HOST_PACKAGES)  # fmt: skip


def write_inventory(
    hosts: SlurmHosts, spec: ClusterSpec, work: Path, extra: dict[str, object] | None = None
) -> Path:
    """The inventory `invoke metal` renders (infra.slurm.files.slurm_inventory), each host reached over
    community.general.chroot in its root."""
    inventory = slurm_inventory(spec, work)
    all_vars = inventory["all"]["vars"]  # type: ignore[index]
    all_vars.update(extra or {})
    inventory["all"]["hosts"] = {  # type: ignore[index]
        h.name: {"ansible_connection": "community.general.chroot", "ansible_host": str(h.root),
                 "ansible_python_interpreter": "/usr/bin/python3"}
        for h in hosts.hosts
    }  # fmt: skip
    path = work / "slurm-inventory.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def _kill_root_processes(roots: list[Path]) -> None:
    """Every process whose root is one of the roots (the daemons the stand-in started)."""
    wanted = {str(r) for r in roots}
    for _ in range(2):
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if os.readlink(proc / "root") in wanted:
                    os.kill(int(proc.name), 9)
            except (OSError, ProcessLookupError):
                continue


@contextmanager
def slurm_hosts(spec: ClusterSpec, work: Path) -> Iterator[SlurmHosts]:
    """The stack's controller and GPU hosts as roots with their own namespaces; everything undone on exit."""
    assert spec.slurm is not None
    tarball, _ = debroot.root_tarball(PACKAGES)
    controller_name = spec.slurm.controller_hosts[0]
    node_pool = spec.node_pools
    nodes = [(h, p.gpus_per_node) for p in node_pool for h in (p.hosts or ())]
    names = [controller_name, *(n for n, _ in nodes)]
    prefix = f"gfslurm{os.getpid() % 100000}"
    mounts: list[Path] = []
    spaces: list[str] = []
    with ExitStack() as stack:
        try:
            spaces = _network(prefix, names)
            controller = Host(controller_name, f"{SUBNET}.1", work / controller_name / "root", spaces[0])
            gpu_hosts = [
                Host(name, f"{SUBNET}.{i + 2}", work / name / "root", spaces[i + 1], gpus)
                for i, (name, gpus) in enumerate(nodes)
            ]
            every = [controller, *gpu_hosts]
            for host in every:
                _prepare(host, tarball, every, stack, mounts)
            render_slurm(spec, work)
            hosts = SlurmHosts(controller, gpu_hosts, work / "slurm", work / "slurm-inventory.yml", mounts)
            hosts.inventory = write_inventory(hosts, spec, work)
            yield hosts
        finally:
            _kill_root_processes([m for m in mounts if m.name == "root"])
            for mount in reversed(mounts):
                subprocess.run(["umount", "-R", "-l", str(mount)], check=False, capture_output=True)
            for ns in spaces:
                subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
