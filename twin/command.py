"""`invoke twin`: the stack's cluster on real components, Kubernetes or Slurm as the stack says, served until
it is interrupted, or running one command in it.

Returns the exit code and, for a failure the user must read about, one line; the command layer only prints it.
An interrupt (KeyboardInterrupt, or `infra.errors.Interrupted` for SIGTERM and SIGHUP) at any point passes
through after the twin is stopped and the lock released.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from infra.errors import ConfigError, on_stop
from infra.slurm.site import uses_slurm
from infra.spec import ClusterSpec
from twin import launch
from twin.slurm import start_twin, twin_environment


def run_twin(
    stack_file: Path,
    spec: ClusterSpec,
    folder: Path,
    *,
    minor: str,
    nodes: str,
    bare: bool,
    run: str,
    monitoring: bool,
    time_scale: str = "1",
    frameworks: bool = True,
) -> tuple[int, str]:
    """Start the twin in `folder` and serve it (or run `run` in it); (exit code, message)."""
    with on_stop("the twin was stopped, with every process it started"):
        if uses_slurm(spec):
            return run_slurm_twin(spec, folder, run=run, minor=minor, bare=bare, monitoring=monitoring,
                                  nodes=nodes, frameworks=frameworks)  # fmt: skip
        if monitoring and not spec.cluster.monitoring.enabled:
            raise ConfigError(
                "--monitoring: gpufleet:cluster.monitoring.prometheus is none; set install or existing"
            )
        started = launch.start(
            stack_file, spec, folder, minor=minor, nodes=nodes, bare=bare, run=run, monitoring=monitoring,
            time_scale=time_scale, frameworks=frameworks,
        )  # fmt: skip
        if run:
            return launch.finish(started), ""
        code = launch.serve(started)
        return (1, f"the twin stopped (exit {code}); logs in {started.folder / 'logs'}") if code else (0, "")


def run_slurm_twin(
    spec: ClusterSpec,
    folder: Path,
    *,
    run: str,
    minor: str,
    bare: bool,
    monitoring: bool,
    nodes: str,
    frameworks: bool = True,
) -> tuple[int, str]:
    """A Slurm stack's twin: its Slurm cluster on loopback (`twin.slurm`), with its accounts; `run` runs where
    sbatch/squeue reach its controller, then it stops."""
    kubernetes_only = [f"--{name}" for name, on in (("minor", minor), ("bare", bare), ("monitoring", monitoring),
                                                    ("nodes", nodes != "desired"),
                                                    ("no-frameworks", not frameworks)) if on]  # fmt: skip
    if kubernetes_only:
        raise ConfigError(
            f"{', '.join(kubernetes_only)}: options of the Kubernetes twin; a Slurm stack's twin runs every host "
            "of its pools as configured"
        )
    held = launch.take_lock(spec.stack, launch.lock_path())
    try:
        cluster = start_twin(spec, folder)
        try:
            env = twin_environment(cluster)
            if run:
                return subprocess.run(run, shell=True, env=env, check=False).returncode, ""
            print(
                f"Slurm twin is up: {len(cluster.hosts)} nodes, accounts {', '.join(t.name for t in spec.teams)}"
            )
            print(f"  export SLURM_CONF={env['SLURM_CONF']}")
            print(
                "  sinfo; sbatch --account=TEAM --gres=gpu:TYPE:N ...   (this user is in every team's account)"
            )
            print("Ctrl-C stops it.")
            while all(p.poll() is None for p in cluster.procs):
                time.sleep(1)
            return 1, f"a Slurm daemon stopped; logs in {cluster.root / 'log'}"
        finally:
            cluster.stop()
    finally:
        held.close()
