"""Slurm as the second orchestrator: the team policy as Slurm accounts, limits, QOS and configuration files.

Pure: the same `PoolView`/`TeamPolicy` views that size the Kueue quotas, and the same unit functions
(`scheduler.resources`), so a team sees the same numbers whichever orchestrator runs its jobs.
"""

from scheduler.slurm.accounting import sacctmgr_script
from scheduler.slurm.config import cgroup_conf, gres_conf, slurm_conf
from scheduler.slurm.jobsubmit import job_submit_lua
from scheduler.slurm.policy import (
    SlurmSite,
    TeamLimit,
    borrow_account,
    borrow_qos,
    gres_type,
    team_limits,
    tres_name,
)

__all__ = [
    "SlurmSite",
    "TeamLimit",
    "borrow_account",
    "borrow_qos",
    "cgroup_conf",
    "gres_conf",
    "gres_type",
    "job_submit_lua",
    "sacctmgr_script",
    "slurm_conf",
    "team_limits",
    "tres_name",
]
