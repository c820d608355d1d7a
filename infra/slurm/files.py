"""The files a Slurm stack is made of: slurm.conf, gres.conf, cgroup.conf, job_submit.lua, the sacctmgr script and
the nodes' health check (`invoke render`, installed by the Slurm roles), and the inventory and command of `playbooks/slurm-cluster.yml`
(`invoke metal`)."""

from __future__ import annotations

from pathlib import Path

from infra.scheduling import scheduler_inputs
from infra.slurm.site import slurm_site
from infra.spec import ClusterSpec
from scheduler.model import PoolView
from scheduler.resources import units_per_gpu
from scheduler.slurm import SlurmSite, cgroup_conf, gres_conf, job_submit_lua, sacctmgr_script, slurm_conf
from scheduler.slurm.config import real_memory_mib
from scheduler.slurm.healthcheck import NAME as HEALTHCHECK
from scheduler.slurm.healthcheck import healthcheck_script

SUBDIR = "slurm"


def slurm_files(spec: ClusterSpec) -> dict[str, str]:
    """File name -> text: what `invoke render` writes (and the Slurm roles will install)."""
    policy, pools = scheduler_inputs(spec)
    site = slurm_site(spec)
    return {
        "slurm.conf": slurm_conf(site, policy, pools),
        "gres.conf": gres_conf(site, pools),
        "cgroup.conf": cgroup_conf(site),
        "job_submit.lua": job_submit_lua(site, pools),
        "sacctmgr.sh": sacctmgr_script(site, policy, pools),
        HEALTHCHECK: healthcheck_script(site, pools),
    }


def render_slurm(spec: ClusterSpec, folder: Path) -> list[Path]:
    out = folder / SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in slurm_files(spec).items():
        path = out / name
        path.write_text(text)
        if name.endswith(".sh") or name == HEALTHCHECK:
            path.chmod(0o755)
        paths.append(path)
    return paths


# ---- `invoke metal` for Slurm stacks: the inventory of playbooks/slurm-cluster.yml ------------------------

SLURM_PLAYBOOK = Path(__file__).resolve().parents[2] / "ansible" / "playbooks" / "slurm-cluster.yml"
INVENTORY_GROUPS = ("slurm_accounting", "slurm_controllers", "slurm_nodes")


def node_group_vars(site: SlurmSite, pool: PoolView) -> dict[str, object]:
    """A pool's hosts' variables: the GPU device files they must have, the CPUs and RealMemory of their NodeName
    line, and on a MIG pool its profile and the instances each host must have."""
    out: dict[str, object] = {
        "slurm_node_expected_gpus": pool.gpus_per_node,
        "slurm_node_cpus": pool.cpus_per_node or 0,
        "slurm_node_real_memory": real_memory_mib(site, pool) or 0,
    }
    if pool.sharing == "mig":
        out["slurm_common_mig_profile"] = pool.mig_profile
        out["slurm_common_mig_instances"] = pool.gpus_per_node * units_per_gpu(pool)
    return out


def slurm_inventory(spec: ClusterSpec, config_dir: Path) -> dict[str, object]:
    """The inventory of playbooks/slurm-cluster.yml: the accounting host (slurmdbd, MariaDB), the controllers
    (slurmctld) and one child group of `slurm_nodes` per pool, whose hosts must have the pool's GPUs and at
    least its NodeName line's CPUs and RealMemory; every role reads the configuration `render_slurm` wrote to
    `config_dir` (its `slurm` folder)."""
    s = spec.slurm
    assert s is not None, "checked by slurm_problems"
    roles: dict[str, dict[str, bool]] = {}
    for host in (s.accounting_host, *s.controller_hosts):
        roles[host] = {
            "slurm_controller_slurmdbd": host == s.accounting_host,
            "slurm_controller_slurmctld": host in s.controller_hosts,
        }
    nodes = {}
    site = slurm_site(spec)
    views = {v.name: v for v in scheduler_inputs(spec)[1]}
    for pool in spec.node_pools:
        nodes[f"slurm_{pool.name.replace('-', '_')}"] = {
            "hosts": dict.fromkeys(pool.hosts or ()),
            "vars": node_group_vars(site, views[pool.name]),
        }
    return {
        "all": {
            "vars": {
                "slurm_common_config_dir": str(config_dir.resolve() / SUBDIR),
                "slurm_common_slurm_version": s.version,
            }
        },
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
