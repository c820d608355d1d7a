"""`invoke metal`: the stack's bare-metal hosts prepared with Ansible, one host group after another, and on a
Slurm stack then its Slurm cluster.

The playbooks run in the foreground through `play` (`run_playbook`: a stop of the command stops Ansible and
its forks within two seconds and says which host group may be half done), and Ansible's collections are
asked for through the caller's `run` (invoke's `Context.run`), so the rollout can be tested without hosts. Driver, container toolkit, fabric manager and verification come from `playbooks/gpu-hosts.yml`; on a
Slurm stack `playbooks/slurm-cluster.yml` then installs MUNGE, slurmdbd, slurmctld, slurmd and the accounts.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from infra.errors import CheckFailed, ConfigError, ToolMissing, on_stop, writing
from infra.gpu_stack.gpu_operator import gpu_operator_values
from infra.metal.inventory import PARENT_GROUP, group_limits, playbook_command, render_inventory
from infra.processes import run_foreground
from infra.slurm.files import render_slurm, slurm_inventory, slurm_playbook_command
from infra.slurm.site import uses_slurm
from infra.spec import ClusterSpec

Run = Callable[..., Any]  # invoke's Context.run
Play = Callable[[list[str], dict[str, str]], int]  # runs one playbook command line, returns its exit status
ANSIBLE_CONFIG = Path(__file__).resolve().parents[2] / "ansible" / "ansible.cfg"


def host_inventory(spec: ClusterSpec) -> dict[str, Any]:
    """The GPU hosts' inventory: one group per pool with its GPU model and count, and the versions to install."""
    groups = [
        {"name": p.name, "hosts": p.hosts, "gpuModel": p.gpu_model, "gpusPerNode": p.gpus_per_node}
        for p in spec.node_pools
    ]
    inventory = render_inventory(
        groups,
        spec.versions.nvidia_driver_branch,
        spec.versions.nvidia_container_toolkit,
        None,
        driver_version=spec.versions.nvidia_driver_version,
        kubeconfig=spec.cluster.kubeconfig,
        # The operator's device plugin asks the runtime for CDI devices; the host toolkit must agree.
        cdi_enabled=spec.cluster.driver_managed_by == "host"
        and bool(gpu_operator_values(spec)["cdi"]["enabled"]),
    )
    if uses_slurm(spec):  # a driver change or reboot drains the host's Slurm node (scontrol), then resumes it
        inventory[PARENT_GROUP]["vars"]["nvidia_driver_drain_enabled"] = True
        inventory[PARENT_GROUP]["vars"]["nvidia_driver_drain_scheduler"] = "slurm"
    return inventory


def playbook_binary(run: Run) -> str:
    """The virtualenv's ansible-playbook (else PATH's), once it is known to have community.general."""
    local = Path(sys.executable).parent / "ansible-playbook"
    binary = str(local) if local.exists() else (shutil.which("ansible-playbook") or "")
    if not binary:
        raise ToolMissing("ansible-playbook not found: pip install 'ansible-core>=2.19,<2.20' (see README)")
    galaxy = Path(binary).with_name("ansible-galaxy")
    listed = run(f"{shlex.quote(str(galaxy))} collection list community.general", hide=True, warn=True)
    if listed is None or "community.general" not in listed.stdout:
        raise ToolMissing(
            f"the playbook needs the community.general collection: {shlex.quote(str(galaxy))} collection "
            "install -r ansible/requirements.yml (from Ansible Galaxy), or, where only PyPI is reachable, "
            f"{shlex.quote(str(Path(binary).with_name('pip')))} install ansible==12.3.0 (it ships "
            "community.general 11.4.2)"
        )
    return binary


def prepare_hosts(
    spec: ClusterSpec,
    folder: Path,
    *,
    check: bool,
    limit: str,
    reboot: bool,
    run: Run,
    play: Play | None = None,
) -> None:
    """Write the inventories (and on a Slurm stack its configuration) to `folder`, then run the playbooks with
    `play` (default `run_playbook`; `run` asks Ansible for its collections); a failed host group stops the
    rollout before the next one starts, and so does a stop of the command, saying what may be half done."""
    if spec.platform != "existing":
        raise ConfigError(
            f"stack {spec.stack!r} is platform {spec.platform}; invoke metal prepares existing-cluster hosts"
        )
    inventory = host_inventory(spec)
    path = folder / "inventory.yml"
    with writing(folder, f"invoke metal writes the inventories to {folder}: make it writable"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        print(f"wrote {path}")
        resume = f"invoke metal --stack {spec.stack} --reboot"
        commands = [
            playbook_command(path, check, group, reboot=reboot, continue_command=resume)
            for group in group_limits(inventory, limit or None)
        ]
        if uses_slurm(spec):  # then Slurm: accounting and controllers first, the GPU hosts in drained batches
            render_slurm(spec, folder)
            slurm_path = folder / "slurm-inventory.yml"
            slurm_path.write_text(yaml.safe_dump(slurm_inventory(spec, folder), sort_keys=False))
            print(f"wrote {slurm_path} and the Slurm configuration in {folder / 'slurm'}")
            commands.append(slurm_playbook_command(slurm_path, check, limit or None))
    binary = playbook_binary(run)
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_CONFIG)}
    for argv in commands:
        argv[0] = binary
        what = argv[argv.index("--limit") + 1] if "--limit" in argv else "the Slurm hosts"
        with on_stop(_half_done(spec, what, check)):
            code = (play or run_playbook)(argv, env)
        if code != 0:
            raise CheckFailed(
                f"the playbook {Path(argv[3]).name} failed for {what} (exit {code}); "
                "see its output and recap above; later host groups were not touched"
            )


def run_playbook(argv: list[str], env: dict[str, str]) -> int:
    """ansible-playbook in the foreground; a stop of the command stops it and its forks (`run_foreground`)."""
    return run_foreground(argv, env)


def _half_done(spec: ClusterSpec, what: str, check: bool) -> str:
    """What an interrupted playbook run may have left, and what to do."""
    if check:
        return f"the dry run for {what} was stopped; nothing was changed"
    return (
        f"{what} may be half done (the play stopped mid-way; later host groups were not touched): run "
        f"`invoke metal --stack {spec.stack}` again, it changes only what is not done yet"
    )
