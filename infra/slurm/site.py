"""The bridge from the spec to the Slurm mapping (`scheduler.slurm`): whether a stack runs Slurm, and its site
(cluster name, controllers, accounting host, hosts and partition options).

The teams and pools come from `infra.scheduling.scheduler_inputs`, the views Kueue is compiled from, so the
Slurm limits and the Kueue quotas are the same numbers by construction.
"""

from __future__ import annotations

from dataclasses import replace

from infra.spec import ClusterSpec
from scheduler.slurm import SlurmSite
from scheduler.slurm.policy import PartitionOptions


def uses_slurm(spec: ClusterSpec) -> bool:
    return spec.cluster.orchestrator == "slurm"


def slurm_site(spec: ClusterSpec) -> SlurmSite:
    s = spec.slurm
    assert s is not None, "checked by slurm_problems"
    site = SlurmSite(
        cluster_name=spec.cluster.name.lower(),  # slurm.conf(5) ClusterName: lower case
        controller_hosts=tuple(s.controller_hosts),
        accounting_host=s.accounting_host,
        hosts={p.name: tuple(p.hosts or ()) for p in spec.node_pools},
        partitions={
            n: PartitionOptions(max_time=o.max_time, default=o.default, default_time=o.default_time)
            for n, o in s.partitions.items()
        },
        memory_margin_percent=s.memory_margin_percent,
        private_data=tuple(dict.fromkeys(s.private_data)),
        version=s.version,
        preempt_grace_seconds=s.preempt_grace_seconds,
        health_check_interval=s.health_check_interval,
    )
    if s.state_save_location:
        site = replace(site, state_save_location=s.state_save_location)
    return site
