"""A team member's view of the queue: their quota per pool, their place in line, and why a job waits, in the
team's terms, from what their own kubeconfig may read (`kubectl gpufleet`, `invoke quota|queue|why|eta`).

Pure rooms build the answers from Kubernetes objects as JSON: `kueue_messages` (Kueue's own pending messages,
parsed), `quota` (the team's ClusterQueue and its cohort), `order` (Kueue's queue order), `reasons` (one
workload's reason and what would let it start), `events` (the answer as an Event on the Workload); for `eta`,
`seed` (the live state as the dynamic simulator's input), `durations` (remaining times from hints, deadlines
and the team's history) and `eta` (the p50 and p90 over seeded runs). `cluster` is the one reader: kubectl
with the caller's kubeconfig; `commands` and `when` join them into the text printed; `cli` is the
`kubectl-gpufleet` console script.
"""
