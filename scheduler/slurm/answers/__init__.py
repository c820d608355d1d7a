"""A Slurm user's view of the queue, the same answers `kubectl gpufleet` gives on Kubernetes: the team's GPU
limits per partition, its waiting jobs in order with the reason in the team's terms, one job's story, and when
a job starts. Everything is read from Slurm 22.05's own commands with the caller's identity, so the answers
hold what Slurm lets the caller see (slurm.conf PrivateData) and nothing more.

Pure rooms parse what the commands print with machine-readable formats: `squeue` (the queue, `--start`'s
estimates), `sprio` (the priority factors), `limits` (the accounts' GrpTRES from `sacctmgr` and their use from
`scontrol show assoc_mgr`), `job` (`scontrol -o show job`); `reasons` turns a job's Reason code into the team's
terms; `texts` builds the printed answers. `reader` is the one place that runs the commands; `commands` joins
them; `cli` is the `gpufleet-slurm` console script.
"""
