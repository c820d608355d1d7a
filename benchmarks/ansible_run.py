"""Ansible timings: ansible-lint over ansible/ (target < 30 s) and the real run of playbooks/gpu-hosts.yml
against a throwaway Debian 12 root (target < 3 min on 2 cores with a warm debootstrap cache): preparing the
root, the converge run, the second (idempotence) run, an upgrade run. Needs root, like the test. Prints numbers; asserts
nothing.

    sudo .venv/bin/python benchmarks/ansible_run.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ansible.community_general import extract_community_general  # noqa: E402
from tests.ansible.debroot import root_tarball  # noqa: E402
from tests.ansible.realrun import (  # noqa: E402
    NEWER_DRIVER_VERSION,
    gpu_host,
    remove_root,
    run_playbook,
    write_inventory,
)
from tests.ansible.support import ansible_environment, venv_tool  # noqa: E402


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gpufleet-ansible-"))
    try:
        start = time.monotonic()
        env = ansible_environment(extract_community_general(work / "collections"), work / "home")
        root_tarball()  # builds the cache on a cold machine; not part of the warm numbers below
        print(f"collections + cache check  {time.monotonic() - start:6.1f} s")

        start = time.monotonic()
        lint = subprocess.run(
            [venv_tool("ansible-lint"), "--offline", "ansible/"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        print(f"ansible-lint               {time.monotonic() - start:6.1f} s  (exit {lint.returncode})")

        start = time.monotonic()
        with gpu_host(work / "host") as host:
            prepared = time.monotonic() - start
            inventory = write_inventory(host, work / "inventory.yml")
            converge = run_playbook(inventory, env)
            again = run_playbook(inventory, env)
            upgrade = run_playbook(write_inventory(host, work / "up.yml", NEWER_DRIVER_VERSION), env)
            print(f"prepare root + stub repos  {prepared:6.1f} s")
            print(f"converge                   {converge.seconds:6.1f} s  {converge.recap()}")
            print(f"second run                 {again.seconds:6.1f} s  {again.recap()}")
            print(f"upgrade run                {upgrade.seconds:6.1f} s  {upgrade.recap()}")
        remove_root(work / "host")
        print(f"real run total             {time.monotonic() - start:6.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
