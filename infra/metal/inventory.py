"""Ansible inventory and command line for preparing bare-metal GPU hosts (`invoke metal`).

Pure functions: the spec's host groups in, a YAML-able inventory dict and an argv list out. One
inventory group per host group, all children of `gpu_hosts` (the group playbooks/gpu-hosts.yml
targets), carrying what the gpu_node_verify role compares each host with.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from infra import catalog
from infra.errors import ConfigError

PLAYBOOK = Path(__file__).resolve().parents[2] / "ansible" / "playbooks" / "gpu-hosts.yml"
PARENT_GROUP = "gpu_hosts"
_GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BRANCH = re.compile(r"^[0-9]+$")
_VERSION = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")


class MetalInventoryError(ConfigError):
    """A host group cannot be turned into an inventory group (names the bad key; exit 2)."""


def _group_name(name: str) -> str:
    """Ansible group names must be identifiers: "gpu-h100" -> "gpu_h100"."""
    group = name.replace("-", "_").replace(".", "_")
    if not _GROUP_NAME.match(group) or group in ("all", "ungrouped", PARENT_GROUP):
        raise MetalInventoryError(
            f"host group name {name!r} cannot be an Ansible group (letters, digits, _ and -)"
        )
    return group


def _group(index: int, host_group: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    where = f"host_groups[{index}]"
    for key in ("name", "hosts", "gpuModel", "gpusPerNode"):
        if key not in host_group:
            raise MetalInventoryError(f"{where} has no {key!r} (needs name, hosts, gpuModel, gpusPerNode)")
    hosts = host_group["hosts"]
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h.strip() for h in hosts):
        raise MetalInventoryError(f"{where}.hosts must be a non-empty list of host names, got {hosts!r}")
    count = host_group["gpusPerNode"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise MetalInventoryError(f"{where}.gpusPerNode must be a positive integer, got {count!r}")
    model = host_group["gpuModel"]
    if not isinstance(model, str) or not model.strip():
        raise MetalInventoryError(f"{where}.gpuModel must be a GPU model name, got {model!r}")
    group = {
        "hosts": {host.strip(): None for host in hosts},
        "vars": {
            "gpu_node_verify_expected_count": count,
            "gpu_node_verify_expected_model": catalog.product_match(model),
        },
    }
    return _group_name(str(host_group["name"])), group


def render_inventory(
    host_groups: list[dict[str, Any]],
    driver_branch: str,
    toolkit_version: str,
    fabricmanager: bool | None,
    driver_version: str = "",
    kubeconfig: str | None = None,
    cdi_enabled: bool = False,
) -> dict[str, Any]:
    """Inventory dict for playbooks/gpu-hosts.yml: one child group of gpu_hosts per host group.

    fabricmanager None lets each host detect NVSwitch devices; True/False forces it everywhere.
    driver_version is the recipe's exact driver (every host the same; raising it upgrades the hosts).
    The hosts are the cluster's GPU nodes, so draining before a reboot or a driver change is on, with
    kubectl reading `cluster.kubeconfig` (None: kubectl's default); a host that is not a node yet is not
    drained (the role asks the API server first). cdi_enabled is the GPU operator's `cdi.enabled`: with
    the driver on the host, containerd/CRI-O must then inject the CDI devices the device plugin names.
    """
    if not isinstance(driver_branch, str) or not _BRANCH.match(driver_branch):
        raise MetalInventoryError(
            f"driver_branch must be a driver major version like '580', got {driver_branch!r}"
        )
    if driver_version and (
        not _VERSION.match(driver_version) or driver_version.split(".")[0] != driver_branch
    ):
        raise MetalInventoryError(
            f"versions.nvidiaDriverVersion {driver_version!r} must be an exact driver version of branch "
            f"versions.nvidiaDriverBranch {driver_branch!r} (like '{driver_branch}.95.05')"
        )
    if kubeconfig is not None and (not isinstance(kubeconfig, str) or not kubeconfig.strip()):
        raise MetalInventoryError(
            f"cluster.kubeconfig must be a path to a kubeconfig file, got {kubeconfig!r}"
        )
    if not isinstance(cdi_enabled, bool):
        raise MetalInventoryError(f"gpuOperator cdi.enabled must be true or false, got {cdi_enabled!r}")
    if not host_groups:
        raise MetalInventoryError("host_groups is empty: the spec has no bare-metal host group to prepare")
    children: dict[str, Any] = {}
    for index, host_group in enumerate(host_groups):
        name, group = _group(index, host_group)
        if name in children:
            raise MetalInventoryError(
                f"host_groups[{index}].name {host_group['name']!r} repeats another group"
            )
        children[name] = group
    seen: dict[str, str] = {}
    for name, group in children.items():
        for host in group["hosts"]:
            if host in seen:
                raise MetalInventoryError(f"host {host!r} is in both host groups {seen[host]!r} and {name!r}")
            seen[host] = name
    return {
        PARENT_GROUP: {
            "vars": {
                "nvidia_driver_branch": driver_branch,
                "nvidia_driver_version": driver_version,
                "nvidia_fabricmanager_driver_branch": driver_branch,
                "nvidia_fabricmanager_enabled": fabricmanager,
                "nvidia_container_toolkit_version": toolkit_version,
                "gpu_node_verify_expected_driver_branch": driver_branch,
                "nvidia_driver_drain_enabled": True,
                "nvidia_driver_drain_kubeconfig": str(Path(kubeconfig).expanduser()) if kubeconfig else "",
                "nvidia_container_toolkit_cdi_enabled": cdi_enabled,
            },
            "children": children,
        }
    }


def playbook_command(
    inventory_path: str | Path,
    check: bool,
    limit: str | None,
    reboot: bool = False,
    continue_command: str = "",
) -> list[str]:
    """argv for ansible-playbook (never a shell string): --check is a dry run, --limit narrows hosts,
    reboot lets the driver role reboot hosts (drained, in batches); continue_command is what the play
    prints when a reboot is pending."""
    argv = ["ansible-playbook", "-i", str(inventory_path), str(PLAYBOOK)]
    if check:
        argv += ["--check", "--diff"]
    if limit:
        argv += ["--limit", limit]
    extra: dict[str, object] = {}
    if reboot:
        extra["nvidia_driver_reboot_allowed"] = True
    if continue_command:
        extra["nvidia_driver_continue_command"] = continue_command
    if extra:
        argv += ["-e", json.dumps(extra)]
    return argv


def group_limits(inventory: dict[str, Any], limit: str | None) -> list[str]:
    """One --limit per host group, in spec order: the play's batches (serial) are then shares of a
    single group, so rebooting batches never take a whole group down; a user limit narrows each.

    Only the groups the user's limit reaches get a run: ansible-playbook exits 1 with "--limit leaves us with
    no hosts to target" for a run whose pattern matches nothing, which would stop the rollout at the first
    group the limit does not touch. The pattern is evaluated by Ansible's own InventoryManager (patterns,
    wildcards, `~regex`, `:&`, `:!` mean exactly what ansible-playbook makes of them), and a limit that
    matches no host at all is refused with the groups and hosts there are."""
    groups = list(inventory[PARENT_GROUP]["children"])
    if not limit:
        return groups
    matched = _limit_matches(inventory, [limit, *(f"{group}:&{limit}" for group in groups)])
    if not matched[0]:
        hosts = [host for group in groups for host in inventory[PARENT_GROUP]["children"][group]["hosts"]]
        raise MetalInventoryError(
            f"--limit {limit!r} matches no host of this stack: an Ansible host pattern over the groups "
            f"{', '.join(groups)} (one per entry of cluster.nodePools) and the hosts {', '.join(hosts)}"
        )
    return [f"{group}:&{limit}" for group, hosts in zip(groups, matched[1:], strict=True) if hosts]


def _limit_matches(inventory: dict[str, Any], patterns: list[str]) -> list[list[str]]:
    """The hosts each pattern selects in this inventory, as ansible-playbook's --limit would select them."""
    import contextlib
    import io
    import tempfile

    import yaml
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inventory.yml"
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        # Ansible warns on stderr for every pattern part that matches nothing; the caller reports instead.
        with contextlib.redirect_stderr(io.StringIO()):
            manager = InventoryManager(loader=DataLoader(), sources=[str(path)])
            return [[host.name for host in manager.get_hosts(pattern)] for pattern in patterns]
