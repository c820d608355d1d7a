#!/usr/bin/python3
"""A stand-in `systemctl` for a throwaway root with no systemd: the calls Ansible's systemd_service module
makes (`show`, `is-enabled`, `enable`, `start`, `stop`, `restart`; ansible-core 2.19
lib/ansible/modules/systemd_service.py), carried out on the unit files the packages installed, as systemd
would for the unit types these packages use (systemd.service(5)):

- `Type=simple`: started in the background, running once spawned; `Type=forking`: the command returns once
  the daemon forked; `Type=notify`: running once it sends `READY=1` to `$NOTIFY_SOCKET` (sd_notify(3)).
- `EnvironmentFile=` (a leading `-`: optional; read before each command), `User=`/`Group=`, `RuntimeDirectory=` under /run, the
  `ExecStartPre=`/`ExecStartPost=` commands (prefixes `-`, `!`, `+`, `@`), `tmpfiles.d` `d` lines before
  each start (systemd-tmpfiles), `PIDFile=`.
- The host's identity: the daemon runs in the network namespace bind-mounted at /run/gpufleet-netns (the
  test host's own addresses) and a UTS namespace named after /etc/hostname, so each root is a host.

It is installed as /usr/local/sbin/systemctl in the roots the Slurm role test builds; nothing of it is part of
the product. Unknown verbs fail, so a role that needs more of systemd shows it.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

UNIT_DIRS = (Path("/etc/systemd/system"), Path("/lib/systemd/system"), Path("/usr/lib/systemd/system"))
STATE = Path("/run/gpufleet-systemd")
ENABLED = Path("/var/lib/gpufleet-systemd/enabled")
NETNS = Path("/run/gpufleet-netns")
LOGS = Path("/var/log/gpufleet-systemd")


def unit_file(name: str) -> Path | None:
    name = name if "." in name else name + ".service"
    for folder in UNIT_DIRS:
        if (folder / name).is_file():
            return folder / name
    return None


def parse(path: Path) -> dict[str, list[str]]:
    """[Service] keys (repeatable ones keep every value), with backslash-continued lines joined."""
    out: dict[str, list[str]] = {}
    section, pending = "", ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def _started(pid: int) -> str:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22): with the pid, it names one
    process, where a pid alone may by now be another's (this machine runs other programs beside the roots)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[19]


def _pid(unit: str) -> int | None:
    f = STATE / f"{unit}.pid"
    if not f.exists():
        return None
    try:
        pid_text, _, started = f.read_text().strip().partition(" ")
        pid = int(pid_text)
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ValueError, OSError):
        return None
    if stat.rsplit(")", 1)[1].split()[0] == "Z" or (started and _started(pid) != started):
        return None
    return pid


def _tmpfiles() -> None:
    """systemd-tmpfiles --create, `d` lines only (tmpfiles.d(5)): before every start, since packages installed
    after the first one add lines (their postinst runs systemd-tmpfiles, which a root without systemd lacks)."""
    for folder in (Path("/usr/lib/tmpfiles.d"), Path("/etc/tmpfiles.d")):
        for conf in sorted(folder.glob("*.conf")) if folder.is_dir() else []:
            for line in conf.read_text().splitlines():
                words = line.split()
                if len(words) >= 2 and words[0] == "d" and words[1].startswith(("/run", "/var/run")):
                    path = Path(words[1])
                    path.mkdir(parents=True, exist_ok=True)
                    if len(words) >= 3 and words[2] != "-":
                        path.chmod(int(words[2], 8))
                    user = words[3] if len(words) >= 4 and words[3] != "-" else "root"
                    group = words[4] if len(words) >= 5 and words[4] != "-" else "root"
                    os.chown(path, pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid)


def _environment(conf: dict[str, list[str]]) -> dict[str, str]:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}
    for value in conf.get("Environment", []):
        for word in shlex.split(value):
            k, _, v = word.partition("=")
            env[k] = v
    for value in conf.get("EnvironmentFile", []):
        path = Path(value.lstrip("-"))
        if not path.exists():
            if value.startswith("-"):
                continue
            raise SystemExit(f"EnvironmentFile {path} is missing")
        dump = subprocess.run(["sh", "-c", f"set -a; . {shlex.quote(str(path))}; env -0"], env=env,
                              capture_output=True, check=True).stdout  # fmt: skip
        env.update(dict(e.split("=", 1) for e in dump.decode().split("\0") if "=" in e))
    return env


def _expand(command: str, env: dict[str, str]) -> list[str]:
    """systemd.service(5) "Command lines": quoting as in the shell; `${FOO}` anywhere in a word replaced by its
    value, `$FOO` as a word of its own replaced by its value split at whitespace; nothing else expanded."""
    out: list[str] = []
    for word in shlex.split(command):
        whole = re.fullmatch(r"\$(\w+)", word)
        if whole:
            out.extend(env.get(whole[1], "").split())
        else:
            out.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m[1], ""), word))
    return out


def _argv(
    command: str, conf: dict[str, list[str]], privileged: bool, env: dict[str, str]
) -> tuple[list[str], bool]:
    """The command line as systemd runs it: prefixes stripped, variables expanded, in the host's namespaces,
    as User= unless `!`/`+`."""
    ignore = False
    while command[:1] in "-!+@:":
        if command[0] == "-":
            ignore = True
        if command[0] in "!+":
            privileged = True
        command = command[1:]
    prefix = ["nsenter", f"--net={NETNS}"] if NETNS.exists() else []
    hostname = Path("/etc/hostname").read_text().strip()
    run_as: list[str] = []
    user = (conf.get("User") or ["root"])[-1]
    if not privileged and user != "root":
        group = (conf.get("Group") or [grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name])[-1]
        run_as = ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups"]
    inner = f'hostname {shlex.quote(hostname)} && exec "$@"'
    return [*prefix, "unshare", "--uts", "sh", "-c", inner, "sh", *run_as, *_expand(command, env)], ignore


def start(unit: str) -> None:
    if _pid(unit):
        return
    path = unit_file(unit)
    if path is None:
        raise SystemExit(f"Unit {unit} not found.")
    conf = parse(path)
    STATE.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    _tmpfiles()
    user = (conf.get("User") or ["root"])[-1]
    for name in " ".join(conf.get("RuntimeDirectory", [])).split():
        d = Path("/run") / name
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(int((conf.get("RuntimeDirectoryMode") or ["0755"])[-1], 8))
        os.chown(d, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    log = open(LOGS / f"{unit}.log", "ab")  # noqa: SIM115
    for pre in conf.get("ExecStartPre", []):
        env = _environment(conf)  # systemd reads EnvironmentFile= before each command it runs
        argv, ignore = _argv(pre, conf, False, env)
        if subprocess.run(argv, env=env, stdout=log, stderr=log, check=False).returncode and not ignore:
            raise SystemExit(f"{unit}: ExecStartPre failed: {pre}")
    kind = (conf.get("Type") or ["simple"])[-1]
    env = _environment(conf)
    notify = STATE / f"{unit}.notify"
    listener = None
    if kind == "notify":
        notify.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind(str(notify))
        os.chmod(notify, 0o777)
        env["NOTIFY_SOCKET"] = str(notify)
    argv, _ = _argv(conf["ExecStart"][-1], conf, False, env)
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    pid = proc.pid
    if kind == "forking":
        if proc.wait(timeout=60):
            raise SystemExit(f"{unit}: {conf['ExecStart'][-1]} failed ({proc.returncode})")
        pidfile = Path((conf.get("PIDFile") or [""])[-1])
        for _ in range(100):
            if pidfile.is_file() and pidfile.read_text().strip():
                break
            time.sleep(0.1)
        pid = int(pidfile.read_text().strip())
    try:
        (STATE / f"{unit}.pid").write_text(f"{pid} {_started(pid)}")
    except OSError:  # already gone: the next status sees no process
        (STATE / f"{unit}.pid").write_text(str(pid))
    if listener is not None:
        listener.settimeout(1)
        end = time.monotonic() + 300
        while time.monotonic() < end:
            try:
                if b"READY=1" in listener.recv(4096):
                    break
            except TimeoutError:
                if proc.poll() is not None:
                    raise SystemExit(f"{unit} exited ({proc.returncode}) before it was ready") from None
        else:
            raise SystemExit(f"{unit} was not ready in 300 s")
        listener.close()
    for post in conf.get("ExecStartPost", []):
        env = _environment(conf)
        argv, ignore = _argv(post, conf, False, env)
        if subprocess.run(argv, env=env, stdout=log, stderr=log, check=False).returncode and not ignore:
            raise SystemExit(f"{unit}: ExecStartPost failed: {post}")


def stop(unit: str) -> None:
    pid = _pid(unit)
    if pid is None:
        return
    conf = parse(unit_file(unit))  # type: ignore[arg-type]
    sig = getattr(signal, (conf.get("KillSignal") or ["SIGTERM"])[-1])
    os.kill(pid, sig)
    for _ in range(300):
        if _pid(unit) is None:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    (STATE / f"{unit}.pid").unlink(missing_ok=True)


def main(args: list[str]) -> int:
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return 1
    verb, units = words[0], [u if "." in u else u + ".service" for u in words[1:]]
    if verb in ("daemon-reload", "daemon-reexec", "unset-environment", "set-environment"):
        return 0
    if verb == "show":
        for unit in units:
            loaded = "loaded" if unit_file(unit) else "not-found"
            active = "active" if _pid(unit) else "inactive"
            sub = "running" if active == "active" else "dead"
            print(f"Id={unit}\nLoadState={loaded}\nActiveState={active}\nSubState={sub}")
        return 0
    if verb == "is-enabled":
        on = all((ENABLED / u).exists() for u in units)
        print("enabled" if on else "disabled")
        return 0 if on else 1
    if verb == "is-active":
        on = all(_pid(u) for u in units)
        print("active" if on else "inactive")
        return 0 if on else 3
    if verb in ("enable", "disable"):
        ENABLED.mkdir(parents=True, exist_ok=True)
        for unit in units:
            if verb == "enable":
                (ENABLED / unit).touch()
            else:
                (ENABLED / unit).unlink(missing_ok=True)
        return 0
    for unit in units:
        if verb == "start":
            start(unit)
        elif verb == "stop":
            stop(unit)
        elif verb == "restart":
            stop(unit)
            start(unit)
        else:
            print(f"stand-in systemctl: {verb} is not modelled", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
