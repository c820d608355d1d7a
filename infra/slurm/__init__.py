"""Slurm as the orchestrator of a bare-metal stack (`cluster.orchestrator: slurm`).

`site` turns the spec into the scheduler's Slurm view and checks it; `files` writes slurm.conf, gres.conf,
cgroup.conf, the sacctmgr script and the Ansible inventory; `plan` the plan's accounts, limits and partitions;
`usage` reads `sacct` for `invoke usage`. The mapping itself (teams to accounts, QOS and partitions) lives in
`scheduler.slurm`.
"""
