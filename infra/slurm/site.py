"""The bridge from the spec to the Slurm mapping (`scheduler.slurm`): the site view, the rules that refuse what
Slurm cannot express (each with its key path), the rendered files and the plan's Slurm tables.

The team and pool views are `infra.scheduling.scheduler_inputs`'s, the ones Kueue is compiled from, so the
Slurm limits and the Kueue quotas are the same numbers by construction.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console

from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from infra.tables import print_table
from scheduler.slurm import SlurmSite, cgroup_conf, gres_conf, sacctmgr_script, slurm_conf, team_limits
from scheduler.slurm.policy import PartitionOptions, borrow_qos

SUBDIR = "slurm"
# Slurm's own account (every association tree's top, sacctmgr(1)): a team may not take its name.
RESERVED_ACCOUNTS = ("root",)


def uses_slurm(spec: ClusterSpec) -> bool:
    return spec.cluster.orchestrator == "slurm"


def slurm_site(spec: ClusterSpec) -> SlurmSite:
    s = spec.slurm
    assert s is not None, "checked by slurm_problems"
    return SlurmSite(
        cluster_name=spec.cluster.name.lower(),  # slurm.conf(5) ClusterName: lower case
        controller_hosts=tuple(s.controller_hosts),
        accounting_host=s.accounting_host,
        hosts={p.name: tuple(p.hosts or ()) for p in spec.node_pools},
        partitions={n: PartitionOptions(o.max_time, o.default) for n, o in s.partitions.items()},
    )


def slurm_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """What Slurm cannot express (or gpufleet does not carry over yet), refused up front with the key path."""
    at = "gpufleet:cluster.orchestrator"
    if not uses_slurm(spec):
        if spec.slurm is not None:
            problems.append("gpufleet:slurm: only with gpufleet:cluster.orchestrator: slurm")
        return
    if spec.platform != "existing":
        problems.append(f"{at}: slurm runs on the hosts of platform existing only; on aws use kubernetes")
        return
    if spec.slurm is None:
        problems.append("gpufleet:slurm: required with orchestrator slurm (controllerHosts, accountingHost)")
        return
    names = [p.name for p in spec.node_pools]
    for name in spec.slurm.partitions:
        if name not in names:
            problems.append(
                f"gpufleet:slurm.partitions.{name}: no pool named {name!r} (pools: {', '.join(names)})"
            )
    if sum(o.default for o in spec.slurm.partitions.values()) > 1:
        problems.append("gpufleet:slurm.partitions: at most one partition may be the default")
    models = Counter(p.gpu_model for p in spec.node_pools if p.sharing.mode == "exclusive")
    shared = [i for i, p in enumerate(spec.node_pools) if p.sharing.mode == "timeSlicing"]
    for i, pool in enumerate(spec.node_pools):
        where = f"gpufleet:nodePools[{i}]"
        if pool.sharing.mode == "exclusive" and models[pool.gpu_model] > 1:
            problems.append(
                f"{where}.gpuModel: another whole-GPU pool has {pool.gpu_model}; Slurm limits GPUs by GRES type "
                "(the GPU model), so two pools of one model cannot have quotas of their own: merge them"
            )
        if pool.topology_labels:
            problems.append(f"{where}.topologyLabels: not carried over to Slurm (topology.conf); remove them")
        if pool.taints:
            problems.append(f"{where}.taints: Kubernetes taints have no Slurm meaning; remove them")
    for i in shared[1:]:
        problems.append(
            f"gpufleet:nodePools[{i}].sharing: Slurm's shard GRES has no type, so only one time-sliced pool "
            "can have per-team limits of its own"
        )
    for i, team in enumerate(spec.teams):
        where = f"gpufleet:teams[{i}]"
        if team.name in RESERVED_ACCOUNTS:
            problems.append(f"{where}.name: {team.name!r} is Slurm's own root account; choose another name")
        if team.lending_limit is not None:
            problems.append(
                f"{where}.lendingLimit: Slurm has no lending limit (every idle GPU is open to a borrow QOS, "
                "requeued when the owner needs it); remove it"
            )
        if any(borrow_qos(team.name) == t.name for t in spec.teams):
            problems.append(f"{where}.name: clashes with the borrow QOS of team {team.name!r}")
    borrow = {borrow_qos(t.name) for t in spec.teams}
    for i, pc in enumerate(spec.scheduling.priority_classes):
        where = f"gpufleet:scheduling.priorityClasses[{i}]"
        if pc.value < 0:
            problems.append(
                f"{where}.value: Slurm's QOS Priority is 0 or more (a priority class is a QOS); got {pc.value}"
            )
        if pc.name in borrow:
            problems.append(f"{where}.name: {pc.name!r} is a team's borrow QOS; choose another name")
    if spec.scheduling.placement.strategy == "FragmentationAware":
        problems.append(
            "gpufleet:scheduling.placement.strategy: FragmentationAware is a Kubernetes scheduler extender; "
            "Slurm places with select/cons_tres"
        )


def slurm_files(spec: ClusterSpec) -> dict[str, str]:
    """File name -> text: what `invoke render` writes (and the Slurm roles will install)."""
    policy, pools = scheduler_inputs(spec)
    site = slurm_site(spec)
    return {
        "slurm.conf": slurm_conf(site, policy, pools),
        "gres.conf": gres_conf(site, pools),
        "cgroup.conf": cgroup_conf(),
        "sacctmgr.sh": sacctmgr_script(site, policy, pools),
    }


def render_slurm(spec: ClusterSpec, folder: Path) -> list[Path]:
    out = folder / SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in slurm_files(spec).items():
        path = out / name
        path.write_text(text)
        if name.endswith(".sh"):
            path.chmod(0o755)
        paths.append(path)
    return paths


def slurm_plan_rows(spec: ClusterSpec) -> tuple[list[str], list[list[str]]]:
    """The plan's Slurm table: per account and partition, the guaranteed GrpTRES and the borrow QOS's."""
    policy, pools = scheduler_inputs(spec)
    header = ["account", "partition", "nodes", "TRES", "guaranteed (GrpTRES)", "borrow QOS", "borrowable"]
    hosts = {p.name: len(p.hosts or ()) for p in spec.node_pools}
    rows = [
        [lim.team, lim.pool, str(hosts[lim.pool]), lim.tres, str(lim.guaranteed), borrow_qos(lim.team),
         str(lim.borrowable)]
        for lim in team_limits(policy, pools)
    ]  # fmt: skip
    return header, rows


def print_slurm_plan(spec: ClusterSpec, console: Console) -> None:
    """The Slurm side of `invoke plan`: accounts, limits and partitions, the Kubernetes plan's numbers. Never
    cut in a narrow terminal (`infra.tables.print_table`; first-use review M1): a table where its words fit,
    otherwise one record per account and partition."""
    header, rows = slurm_plan_rows(spec)
    print_table(
        console,
        "Slurm accounts and limits (GPU units of each partition's GRES)",
        header,
        rows,
        justify=["right" if i in (2, 4, 6) else "left" for i in range(len(header))],
        key=2,
        heading=lambda row: f"account {row[0]}  partition {row[1]}",
    )


# ---- `invoke metal` for Slurm stacks: the inventory of playbooks/slurm-cluster.yml ------------------------

SLURM_PLAYBOOK = Path(__file__).resolve().parents[2] / "ansible" / "playbooks" / "slurm-cluster.yml"
INVENTORY_GROUPS = ("slurm_accounting", "slurm_controllers", "slurm_nodes")


def slurm_inventory(spec: ClusterSpec, config_dir: Path) -> dict[str, object]:
    """The inventory of playbooks/slurm-cluster.yml: the accounting host (slurmdbd, MariaDB), the controllers
    (slurmctld) and one child group of `slurm_nodes` per pool, whose hosts must have the pool's GPUs; every
    role reads the configuration `render_slurm` wrote to `config_dir` (its `slurm` folder)."""
    s = spec.slurm
    assert s is not None, "checked by slurm_problems"
    roles: dict[str, dict[str, bool]] = {}
    for host in (s.accounting_host, *s.controller_hosts):
        roles[host] = {
            "slurm_controller_slurmdbd": host == s.accounting_host,
            "slurm_controller_slurmctld": host in s.controller_hosts,
        }
    nodes = {}
    for pool in spec.node_pools:
        gpus = 0 if pool.sharing.mode == "mig" else pool.gpus_per_node  # MIG: NVML finds the instances
        nodes[f"slurm_{pool.name.replace('-', '_')}"] = {
            "hosts": dict.fromkeys(pool.hosts or ()),
            "vars": {"slurm_node_expected_gpus": gpus},
        }
    return {
        "all": {"vars": {"slurm_common_config_dir": str(config_dir.resolve() / SUBDIR)}},
        "slurm_accounting": {"hosts": {s.accounting_host: roles[s.accounting_host]}},
        "slurm_controllers": {"hosts": {h: roles[h] for h in s.controller_hosts}},
        "slurm_nodes": {"children": nodes},
    }


def slurm_playbook_command(inventory_path: Path, check: bool, limit: str | None) -> list[str]:
    """argv of the Slurm rollout (never a shell string): controller first, then the nodes in drained batches
    (the playbook's plays); --check is a dry run, --limit narrows the hosts."""
    argv = ["ansible-playbook", "-i", str(inventory_path), str(SLURM_PLAYBOOK)]
    if check:
        argv += ["--check", "--diff"]
    if limit:
        argv += ["--limit", limit]
    return argv
