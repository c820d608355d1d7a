"""slurm.conf, gres.conf and cgroup.conf for a Slurm stack, from the pool views (Slurm 22.05, Debian 12's).

Every option is a documented 22.05 one: slurm.conf(5), gres.conf(5), cgroup.conf(5)
(https://slurm.schedmd.com/slurm.conf.html, gres.conf.html, cgroup.conf.html; the tests check each key
against the installed manual pages where Slurm is installed).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.model import PoolView, SchedulingPolicy
from scheduler.resources import units_per_gpu
from scheduler.slurm.healthcheck import healthcheck_conf
from scheduler.slurm.policy import PartitionOptions, SlurmSite, gres_type, slurm_version, tres_name

# PriorityWeightFairshare when fair sharing is on (slurm.conf(5): the factor is 0..1, times this weight).
FAIRSHARE_WEIGHT = 10000
PRIORITY_WEIGHT_AGE = 1000
# Above fair share: a production job goes before a default one of a team with more share left.
PRIORITY_WEIGHT_QOS = 100000


def _line(name: str, **options: str | int) -> str:
    return " ".join([name, *(f"{k}={v}" for k, v in options.items())])


def gres_types(pools: Sequence[PoolView]) -> list[str]:
    """GresTypes: `gpu`, and `shard` when a pool is time-sliced (slurm.conf(5) GresTypes)."""
    return ["gpu", *(["shard"] if any(p.sharing == "timeSlicing" for p in pools) else [])]


def node_gres(pool: PoolView) -> str:
    """A node's `Gres=`: typed GPUs (MIG: one per instance), and its shards on time-sliced pools."""
    gpus = pool.gpus_per_node * (pool.mig_instances_per_gpu or 1 if pool.sharing == "mig" else 1)
    out = f"gpu:{gres_type(pool)}:{gpus}"
    if pool.sharing == "timeSlicing":
        out += f",shard:{pool.gpus_per_node * units_per_gpu(pool)}"
    return out


def accounting_tres(pools: Sequence[PoolView]) -> str:
    """AccountingStorageTRES: `gres/gpu` (GPU-hours of any type) and every TRES a limit is counted in; a typed
    GRES is only counted for jobs that request that type (slurm.conf(5) AccountingStorageTRES)."""
    return ",".join(dict.fromkeys(["gres/gpu", *(tres_name(p) for p in pools)]))


def real_memory_mib(site: SlurmSite, pool: PoolView) -> int | None:
    """A node's RealMemory: the pool's nominal memory (the simulator's number) less the site's margin, in MiB
    (`SlurmSite.memory_margin_percent`). A node registers only if it reports at least this much."""
    if not pool.memory_gib_per_node:
        return None
    return pool.memory_gib_per_node * 1024 * (100 - site.memory_margin_percent) // 100


def node_size(site: SlurmSite, pool: PoolView) -> dict[str, str | int]:
    """`Gres`, `CPUs` and `RealMemory` of a pool's NodeName line."""
    node: dict[str, str | int] = {"Gres": node_gres(pool)}
    if pool.cpus_per_node:
        node["CPUs"] = pool.cpus_per_node
    memory = real_memory_mib(site, pool)
    if memory:
        node["RealMemory"] = memory
    return node


def partition_defaults(site: SlurmSite, pool: PoolView) -> dict[str, str | int]:
    """What a job gets when it asks for no memory or cores: its GPUs' share of the node. Without a default a job
    that names no `--mem` is given all of a node's memory (job_mgr.c sets DefMemPerCPU, 0 when unset, and
    select/cons_tres takes 0 for "all memory": SchedMD/slurm@slurm-22-05-8-1 src/slurmctld/job_mgr.c
    `_validate_job_desc`, src/plugins/select/cons_common/job_test.c `_verify_node_state`), so one 1-GPU job
    would block the node's other GPUs. GPU partitions get DefMemPerGPU and DefCpuPerGPU (cons_tres applies them to the job's
    `gpu` GRES: job_test.c `_set_gpu_defaults`); a time-sliced partition, whose jobs ask for shards, not GPUs,
    gets DefMemPerCPU. slurm.conf(5): DefMemPerCPU, DefMemPerGPU and DefMemPerNode are mutually exclusive."""
    memory = real_memory_mib(site, pool)
    cpus = pool.cpus_per_node
    out: dict[str, str | int] = {}
    if pool.sharing == "timeSlicing":
        if memory and cpus:
            out["DefMemPerCPU"] = memory // cpus
        return out
    gpus = pool.gpus_per_node * units_per_gpu(pool)  # MIG: each instance is a `gpu` GRES
    if cpus:
        out["DefCpuPerGPU"] = max(1, cpus // gpus)
    if memory:
        out["DefMemPerGPU"] = memory // gpus
    return out


def node_lines(site: SlurmSite, pools: Sequence[PoolView]) -> list[str]:
    """One NodeName line per pool (or per host where a host has an address or port of its own)."""
    lines = []
    for pool in pools:
        node = {**node_size(site, pool), "State": "UNKNOWN"}
        hosts = site.hosts[pool.name]
        if not any(h in site.node_addresses or h in site.node_ports for h in hosts):
            lines.append(_line(f"NodeName={','.join(hosts)}", **node))
            continue
        for host in hosts:
            where: dict[str, str | int] = {}
            if host in site.node_addresses:
                where["NodeAddr"] = site.node_addresses[host]
            if host in site.node_ports:
                where["Port"] = site.node_ports[host]
            lines.append(_line(f"NodeName={host}", **where, **node))
    return lines


def partition_lines(site: SlurmSite, pools: Sequence[PoolView]) -> list[str]:
    """One PartitionName line per pool: its hosts, time limits and the jobs' default share of a node."""
    lines = []
    for pool in pools:
        opts = site.partitions.get(pool.name, PartitionOptions())
        times = {
            "MaxTime": opts.max_time,
            **({"DefaultTime": opts.default_time} if opts.default_time else {}),
        }
        lines.append(
            _line(
                f"PartitionName={pool.name}",
                Nodes=",".join(site.hosts[pool.name]),
                **times,
                **partition_defaults(site, pool),
                Default="YES" if opts.default else "NO",
                State="UP",
            )
        )
    return lines


def slurm_conf(site: SlurmSite, policy: SchedulingPolicy, pools: Sequence[PoolView]) -> str:
    """The cluster-wide slurm.conf: controller, accounting with enforced limits, multifactor fair-share, QOS
    preemption by requeue (https://slurm.schedmd.com/preempt.html), cgroup confinement, nodes, partitions."""
    lines = [
        "# Generated by gpufleet from the stack file; edit the stack, not this file.",
        f"ClusterName={site.cluster_name}",
        *(f"SlurmctldHost={h}" for h in site.controller_hosts),
        "AuthType=auth/munge",
        "SlurmUser=slurm",
        f"StateSaveLocation={site.state_save_location}",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "JobAcctGatherType=jobacct_gather/cgroup",
        f"GresTypes={','.join(gres_types(pools))}",
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={site.accounting_host}",
        "AccountingStorageEnforce=associations,limits,qos,safe",
        f"AccountingStorageTRES={accounting_tres(pools)}",
        "PriorityType=priority/multifactor",
        f"PriorityWeightFairshare={FAIRSHARE_WEIGHT if policy.fair_sharing else 0}",
        f"PriorityWeightAge={PRIORITY_WEIGHT_AGE}",
        # the QOS factor is the job's QOS Priority over the highest one: the workload priority classes
        # (slurm.conf(5) PriorityWeightQOS; priority_multifactor.html, "QOS Factor")
        f"PriorityWeightQOS={PRIORITY_WEIGHT_QOS}",
        "PreemptType=preempt/qos",
        "PreemptMode=REQUEUE",
        # a preempted batch job is requeued only where JobRequeue=1 or it asked for --requeue (preempt.html,
        # PreemptMode REQUEUE); 1 is the default, written out because borrowing depends on it
        "JobRequeue=1",
        # every job submitted or changed passes job_submit.lua: untyped GPU requests are counted by type
        # (scheduler.slurm.jobsubmit)
        "JobSubmitPlugins=lua",
        # every job gets an "extern" step at allocation, which pam_slurm_adopt puts a user's ssh session into:
        # on a GPU node one sees only the GPUs of one's job (pam_slurm_adopt.html; slurm.conf(5) PrologFlags)
        "PrologFlags=Contain",
        *([f"PrivateData={','.join(site.private_data)}"] if site.private_data else []),
        # gpufleet-healthcheck drains a node whose GPUs are missing or faulty (scheduler.slurm.healthcheck)
        *healthcheck_conf(site),
    ]
    return "\n".join([*lines, *node_lines(site, pools), *partition_lines(site, pools)]) + "\n"


def gres_conf(site: SlurmSite, pools: Sequence[PoolView]) -> str:
    """gres.conf: the typed GPUs with their device files on whole-GPU and time-sliced pools so the cgroup can
    confine them (NVML autodetection where Slurm has it), and each GPU's shards (gres.conf(5) Count: for
    Sharding, entries per GPU). A MIG instance's device files are the host's own (which instances exist, and
    their capability minors): the Slurm roles append each MIG host's lines (roles/slurm_common: from nvidia-smi
    with MultipleFiles, or AutoDetect=nvml where Slurm's NVML plugin is installed)."""
    lines = ["# Generated by gpufleet from the stack file; edit the stack, not this file."]
    for pool in pools:
        nodes = ",".join(site.hosts[pool.name])
        if pool.sharing == "mig":
            lines.append(
                f"# NodeName={nodes}: {gres_type(pool)} MIG instances, each host's own lines at the end"
            )
            continue
        last = pool.gpus_per_node - 1
        files = f"/dev/nvidia[0-{last}]" if last else "/dev/nvidia0"
        lines.append(
            _line(f"NodeName={nodes}", AutoDetect="nvml", Name="gpu", Type=gres_type(pool), File=files)
        )
        if pool.sharing == "timeSlicing":
            for i in range(pool.gpus_per_node):
                lines.append(
                    _line(
                        f"NodeName={nodes}", Name="shard", Count=units_per_gpu(pool), File=f"/dev/nvidia{i}"
                    )
                )
    return "\n".join(lines) + "\n"


def cgroup_conf(site: SlurmSite) -> str:
    """cgroup.conf: a job sees only the GPUs it was given (ConstrainDevices), its cores and its memory; the
    Slurm twin of "no GPU without a request" (cgroup.conf(5)). CgroupPlugin autodetect takes v1 or v2 from the
    host, from 22.05 on; 21.08 has no cgroup/v2 plugin (SchedMD/slurm@slurm-21-08-5-1 src/plugins/cgroup has
    only v1), and autodetect would pick v2 on a unified host, so 21.08 names cgroup/v1 and its hosts must boot
    with cgroup v1 (the slurm_common role checks)."""
    plugin = "cgroup/v1" if slurm_version(site.version) < (22, 5) else "autodetect"
    return (
        "\n".join(
            [
                "# Generated by gpufleet from the stack file; edit the stack, not this file.",
                f"CgroupPlugin={plugin}",
                "ConstrainCores=yes",
                "ConstrainDevices=yes",
                "ConstrainRAMSpace=yes",
            ]
        )
        + "\n"
    )
