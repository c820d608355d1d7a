"""The one reader: Slurm's own client commands, run as the caller with the caller's environment (SLURM_CONF,
or the configless lookup), so every answer is what Slurm lets the caller see.

Commands rather than slurmrestd because the answers run where users submit: a login node has the clients and
their authentication (MUNGE) working, slurmrestd and its tokens often not.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.explain.cluster import ClusterError

CLIENTS = ("squeue", "sprio", "sacctmgr", "scontrol", "sinfo")


@dataclass(frozen=True)
class Slurm:
    """`as_user`: run the clients as that user (runuser(1), root only), to see what a member sees."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    timeout: float = 30
    as_user: str = ""

    def user(self) -> str:
        """The caller's user name, as Slurm knows it (the uid MUNGE vouches for)."""
        return self.as_user or pwd.getpwuid(os.getuid()).pw_name

    def run(self, *argv: str) -> str:
        """A client command's stdout; exit 3 with its last error line when it fails."""
        prefix = ("runuser", "-u", self.as_user, "--") if self.as_user else ()
        return self._run(prefix, argv)

    def _run(self, prefix: tuple[str, ...], argv: tuple[str, ...]) -> str:
        if shutil.which(argv[0], path=self.env.get("PATH")) is None:
            raise ClusterError(f"{argv[0]} is not on PATH: run this where Slurm's client commands are "
                               "(a login node; Debian: apt-get install slurm-client)")  # fmt: skip
        try:
            done = subprocess.run([*prefix, *argv], env=dict(self.env), capture_output=True, text=True, timeout=self.timeout,
                                  check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise ClusterError(
                f"{argv[0]} did not answer within {self.timeout:.0f}s: is slurmctld up?"
            ) from None
        if done.returncode != 0:
            said = [ln for ln in done.stderr.splitlines() if ln.strip()]
            raise ClusterError(f"{' '.join(argv[:3])}: {said[-1] if said else f'exit {done.returncode}'}")
        return done.stdout
