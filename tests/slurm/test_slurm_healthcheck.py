"""gpufleet-healthcheck, fast: slurm.conf names it, it lists each node's GPU device files, and the script itself
(POSIX sh, as slurmd runs it: SLURMD_NODENAME) drains a node with a missing GPU, one nvidia-smi cannot see,
uncorrected ECC errors or a recent fatal Xid, and leaves healthy nodes and other reasons' drains alone.
nvidia-smi, dmesg and scontrol are stubs here; the same script on real daemons is in test_slurm_daemons.py."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.scheduling import scheduler_inputs
from infra.slurm.files import slurm_files
from infra.slurm.site import slurm_site
from infra.stackfile import load_stack
from scheduler.slurm.healthcheck import PROGRAM, healthcheck_script
from tests.preflight.helpers import stack_doc, write_stack
from tests.slurm.daemon_stack import daemon_stack

NODE = "gpu-h100-01"  # two GPUs in the daemon stack
IDLE = f"NodeName={NODE} Arch=x86_64 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1"
HEALTHY_SMI = "0, 0\n1, 0\n"


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@dataclass
class Run:
    rc: int
    output: str
    updates: list[str]  # the argv of each `scontrol update`


def _run(tmp_path: Path, present: tuple[int, ...] = (0, 1), smi: str = HEALTHY_SMI, smi_rc: int = 0,
         dmesg: str | None = "", shown: str = IDLE, node: str = NODE) -> Run:  # fmt: skip
    """The script for the daemon stack's nodes, its GPUs in tmp_path/dev (links to /dev/null: character
    devices), run with slurmd's one variable and stubs for nvidia-smi, dmesg (None: not readable) and scontrol
    (`show node` prints `shown`, `update` is recorded)."""
    dev, stubs = tmp_path / "dev", tmp_path / "bin"
    dev.mkdir(parents=True, exist_ok=True)
    stubs.mkdir(exist_ok=True)
    for n in present:
        (dev / f"nvidia{n}").symlink_to("/dev/null")
    spec = daemon_stack(tmp_path)
    script = tmp_path / "gpufleet-healthcheck"
    script.write_text(healthcheck_script(slurm_site(spec), scheduler_inputs(spec)[1], device_dir=str(dev)))
    _stub(stubs, "nvidia-smi", f"printf '%s' {shlex.quote(smi)}; exit {smi_rc}")
    _stub(stubs, "dmesg", "exit 1" if dmesg is None else f"printf '%s' {shlex.quote(dmesg)}")
    log = tmp_path / "updates"
    _stub(
        stubs,
        "scontrol",
        f'[ "$1" = update ] && echo "$*" >> {log}; [ "$1" = -o ] && echo {shlex.quote(shown)}; exit 0',
    )
    env = {"SLURMD_NODENAME": node, "PATH": f"{stubs}:/usr/bin:/bin"}
    done = subprocess.run(
        ["sh", str(script)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    updates = log.read_text().splitlines() if log.exists() else []
    return Run(done.returncode, done.stdout + done.stderr, updates)


def _drain(reason: str) -> str:
    return f"update NodeName={NODE} State=DRAIN Reason=gpufleet-healthcheck: {reason}"


def test_slurm_conf_runs_the_health_check_every_interval_and_the_script_lists_each_nodes_gpus(
    tmp_path: Path,
) -> None:
    """slurm.conf(5) HealthCheckProgram (a fully qualified path, run as root by slurmd), HealthCheckInterval
    (default here 300 s; 0 writes none: Slurm's 0 disables it) and HealthCheckNodeState=ANY (nodes running jobs
    too). The script names each pool's hosts and the /dev/nvidiaN files gres.conf gives them."""
    files = slurm_files(load_stack(write_stack(tmp_path, "hc", stack_doc("metal-slurm"))))
    conf = files["slurm.conf"].splitlines()
    keys = {f"HealthCheckProgram={PROGRAM}", "HealthCheckInterval=300", "HealthCheckNodeState=ANY"}
    assert keys <= set(conf), conf
    lines = files["gpufleet-healthcheck"].splitlines()
    h100 = " ".join(f"/dev/nvidia{i}" for i in range(8))
    assert f'gpu-h100-01|gpu-h100-02|gpu-h100-03|gpu-h100-04) gpus="{h100}" ;;' in lines, lines
    l40s = " ".join(f"/dev/nvidia{i}" for i in range(4))
    assert f'gpu-l40s-01|gpu-l40s-02|gpu-l40s-03) gpus="{l40s}" ;;' in lines
    assert lines[0] == "#!/bin/sh"

    def off(config: dict[str, Any]) -> None:
        config["gpufleet:slurm"]["healthCheckInterval"] = 0

    doc = stack_doc("metal-slurm")
    off(doc["config"])
    quiet = slurm_files(load_stack(write_stack(tmp_path, "hc-off", doc)))["slurm.conf"]
    assert "HealthCheck" not in quiet


def test_a_healthy_node_exits_0_and_is_not_touched(tmp_path: Path) -> None:
    run = _run(tmp_path, smi="0, 0\n1, [N/A]\n")  # ECC off on a GPU: nothing to count
    assert (run.rc, run.updates) == (0, []), run


@pytest.mark.parametrize(
    "case,kwargs,reason",
    [
        ("missing", {"present": (0,)}, "1 of 2 GPUs missing ({dev}/nvidia1)"),
        ("both-missing", {"present": (), "smi": ""}, "2 of 2 GPUs missing ({dev}/nvidia0, {dev}/nvidia1); "
         "nvidia-smi sees 0 of 2 GPUs"),
        ("off-the-bus", {"smi": "0, 0\nUnable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n",
                         "smi_rc": 15},
         "nvidia-smi sees 1 of 2 GPUs (Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error)"),
        ("ecc", {"smi": "0, 0\n1, 3\n"}, "uncorrected ECC errors on GPU 1"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v else "",
)  # fmt: skip
def test_a_missing_or_faulty_gpu_drains_the_node_with_the_reason(
    tmp_path: Path, case: str, kwargs: dict[str, Any], reason: str
) -> None:
    run = _run(tmp_path, **kwargs)
    assert run.rc == 1 and run.updates == [_drain(reason.format(dev=tmp_path / "dev"))], (case, run)


def test_a_recent_fatal_xid_drains_and_old_or_application_xids_do_not(tmp_path: Path) -> None:
    """Xid 79 ("GPU has fallen off the bus") within two intervals drains; Xid 13 (the application's own fault)
    and an Xid older than the window do not; an unreadable kernel log is no problem."""
    now = _uptime()
    recent = f"[{now - 5:12.6f}] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    app = f"[{now - 5:12.6f}] NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python, Graphics Exception\n"
    run = _run(tmp_path, dmesg=app + recent + recent)
    assert run.updates == [_drain("Xid 79 on PCI:0000:3b:00")], run
    for dmesg in (app, None):
        (tmp_path / "updates").unlink(missing_ok=True)
        assert _run(tmp_path / str(dmesg is None), dmesg=dmesg).updates == []
    if now > 1200:
        old = f"[{now - 1200:12.6f}] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', GPU has fallen off the bus.\n"
        assert _run(tmp_path / "old", dmesg=old).updates == []


def test_an_admins_drain_keeps_its_reason_and_nothing_is_ever_resumed(tmp_path: Path) -> None:
    """A node drained or down for another reason keeps it (an admin's, a rollout's); a node this check drained is
    drained again with what is wrong now; a drained node that is healthy again is left drained (an admin
    resumes it)."""
    admin = IDLE.replace("State=IDLE", "State=IDLE+DRAIN") + " Reason=bad GPU [root@2025-01-01T00:00:00]"
    run = _run(tmp_path / "admin", present=(0,), shown=admin)
    assert run.rc == 1 and run.updates == [] and "for another reason (bad GPU)" in run.output, run
    down = IDLE.replace("State=IDLE", "State=DOWN") + " Reason=Not responding [slurm@2025-01-01T00:00:00]"
    assert _run(tmp_path / "down", present=(0,), shown=down).updates == []
    ours = admin.replace("bad GPU", "gpufleet-healthcheck: 1 of 2 GPUs missing (/dev/nvidia1)")
    again = _run(tmp_path / "ours", present=(), smi="", shown=ours)
    assert len(again.updates) == 1 and "2 of 2 GPUs missing" in again.updates[0], again
    healthy = _run(tmp_path / "healthy", shown=ours)
    assert (healthy.rc, healthy.updates) == (0, [])


def test_a_node_the_stack_does_not_know_is_left_alone(tmp_path: Path) -> None:
    run = _run(tmp_path, present=(), node="login-01")
    assert (run.rc, run.updates) == (0, [])
