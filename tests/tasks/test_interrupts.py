"""A stopped command stops everything it started within seconds, says what was left half-done, and exits
128 + the signal's number (130 for Ctrl-C's SIGINT, 143 for SIGTERM), as a shell reports a command a signal
ended; an output folder that cannot be written is one line, exit 2. Each command runs as a user runs it: `python
-m invoke ...` in a process of its own, without a terminal, signalled as a CI runner or `timeout` would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from infra.processes import descendants
from tests.conftest import ROOT
from tests.support import eventually

pytestmark = pytest.mark.xdist_group("build-metal")

# from the signal to the command's exit, with every process it started gone: infra.processes.GRACE_S (1.2 s) to
# wind down, then the kill; about 2 s on an idle machine, 2.2 s seen at a load average of 10; the stand-ins
# ignore the signal and sleep 600 s, so a command that did not kill them would take minutes
STOP_S = 5.0


def start(
    *args: str, env: dict[str, str] | None = None, python: str = sys.executable
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [python, "-m", "invoke", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def stop(command: subprocess.Popen[str], sig: signal.Signals) -> tuple[float, str, str, list[int]]:
    """Signal `command`; (seconds until it exited, stdout, stderr, the processes it had started still alive)."""
    started = descendants(command.pid)
    sent = time.monotonic()
    command.send_signal(sig)
    out, err = command.communicate(timeout=60)
    took = time.monotonic() - sent
    left = [pid for pid in started if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return took, out, err, left


def first_run_done(stdout: IO[str], timeout: float = 120) -> None:
    """Read the command's output up to the line of its first finished approach run (`[1/12] ...`, printed and
    flushed per run when no terminal draws the bar); the command prints a line every few seconds until it ends,
    so each read returns."""
    deadline = time.monotonic() + timeout
    while not (line := stdout.readline()).startswith("[1/"):
        assert line, "the command ended before its first run finished"
        assert time.monotonic() < deadline, f"no run finished within {timeout:.0f} s"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_simulate_stops_its_workers_and_says_nothing_was_written(
    sig: signal.Signals, shared_dir: Path, tmp_path: Path
) -> None:
    """The docs' paper-world replay (90 runs on two worker processes): a stop ends it and its workers at
    once, not after the queued runs (a ProcessPoolExecutor ran them all first, for up to 80 s)."""
    traces = shared_dir / "traces/alibaba-gpu-v2023"
    command = start("simulate", "--nodes", str(traces / "openb_node_list_gpu_node.csv"), "--pods",
                    str(traces / "openb_pod_list_default.csv"), "--processes", "2", "--out", str(tmp_path / "sim"))  # fmt: skip
    eventually(lambda: len(descendants(command.pid)) >= 2, "the two simulation workers", every=0.1)
    took, _, err, left = stop(command, sig)
    assert command.returncode == 128 + sig, err
    assert took < STOP_S and not left, (took, left)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"stopped by {sig.name}" in err and "runs had finished" in err
    assert f"nothing was written to {tmp_path / 'sim'}" in err
    assert not (tmp_path / "sim").exists()


def test_dynamic_simulate_stops_at_once_and_says_nothing_was_written(
    shared_dir: Path, tmp_path: Path
) -> None:
    """`simulate --dynamic` runs in this process: Ctrl-C ends it with 130 and a word on what it wrote."""
    pods = shared_dir / "traces/alibaba-gpu-v2023/openb_pod_list_default.csv"
    command = start("simulate", "--dynamic", "--stack", "example-prod", "--pods", str(pods), "--time-scale",
                    "0.01", "--out", str(tmp_path / "dyn"))  # fmt: skip
    assert command.stdout is not None
    line = command.stdout.readline()  # the preamble: the world is built, the runs start
    assert line.startswith("stack: example-prod"), line
    first_run_done(command.stdout)  # stopped mid-comparison, with runs still to go
    took, _, err, left = stop(command, signal.SIGINT)
    assert command.returncode == 130, err
    assert took < STOP_S and not left
    assert err.strip() == f"stopped by SIGINT (Ctrl-C): nothing was written to {tmp_path / 'dyn'}", err


def fake_venv(tmp_path: Path) -> Path:
    """A virtual environment with this one's packages whose Ansible is a stand-in: `ansible-galaxy` lists the
    collection, `ansible-playbook` starts a child and waits, ignoring interrupts as a busy play may, so only a
    kill ends the two (what `invoke metal` must do on a stop). Returns its python."""
    venv = Path(sys.prefix)
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    (root / "lib").symlink_to(venv / "lib")
    (root / "bin/python").symlink_to(Path(sys.executable).resolve())
    scripts = {
        "ansible-galaxy": "#!/bin/sh\necho 'community.general 11.4.2'\n",
        "ansible-playbook": f"#!/bin/sh\ntrap '' INT TERM\necho playing > {tmp_path / 'playing'}\nsleep 600 &\nsleep 600\n",
    }
    for name, text in scripts.items():
        (root / "bin" / name).write_text(text)
        (root / "bin" / name).chmod(0o755)
    return root / "bin/python"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_metal_stops_ansible_and_its_children_and_names_the_group_left_half_done(
    sig: signal.Signals, tmp_path: Path
) -> None:
    """Without a terminal (a cancelled CI job), a stop during the play stops ansible-playbook and what it
    started, prints one line naming the host group that may be half done (no traceback of invoke's runner
    writing to a closed stdin), and exits 130 or 143."""
    python = fake_venv(tmp_path)
    command = start(
        "metal", "--stack", "metal", env={**os.environ, "PYTHONPATH": str(ROOT)}, python=str(python)
    )
    eventually(lambda: (tmp_path / "playing").exists() and len(descendants(command.pid)) >= 3,
               "the stand-in playbook and its child", every=0.1)  # fmt: skip
    took, _, err, left = stop(command, sig)
    assert command.returncode == 128 + sig, err
    assert took < STOP_S and not left, (took, left)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"stopped by {sig.name}") and "h100 may be half done" in err
    assert "invoke metal --stack metal` again" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--stack", "dev", "--out", "/proc/gpufleet-no-such-folder"],
        ["render", "--stack", "metal", "--out", "/proc/gpufleet-no-such-folder"],
    ],
)
def test_an_output_folder_that_cannot_be_written_is_one_line_exit_2(argv: list[str]) -> None:
    """A read-only checkout, a cache mount or `--out` somewhere unwritable: one line naming the path and the
    reason, exit 2 (the fix is an option of the command line), no traceback."""
    done = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: cannot write /proc/gpufleet-no-such-folder"), done.stderr
    assert "pass --out DIR" in done.stderr and len(done.stderr.strip().splitlines()) == 1
