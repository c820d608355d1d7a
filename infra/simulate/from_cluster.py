"""`invoke trace --from-cluster`: a running cluster's finished GPU work and GPU nodes written as the two files
`invoke simulate` reads, so a team's own history can be replayed against other placements, quotas and pools.

Reads with kubectl and the caller's kubeconfig (cluster-wide Workloads and nodes: an administrator's view); the
rows are built by :func:`scheduler.sim.cluster_trace.cluster_trace`.
"""

from __future__ import annotations

from pathlib import Path

from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from scheduler.explain.cluster import Kubectl
from scheduler.sim.cluster_trace import cluster_trace

WORKLOADS = "workloads.kueue.x-k8s.io"


def export_trace(spec: ClusterSpec, kubectl: Kubectl, out: Path) -> str:
    """Write `out/pods.csv` (the generic timed format) and `out/nodes.csv` (openb nodes); the summary to print."""
    policy, pools = scheduler_inputs(spec)
    teams = {t.namespace: t.name for t in policy.teams}
    workloads = kubectl.get(WORKLOADS, "--all-namespaces").get("items", [])
    nodes = kubectl.get("nodes").get("items", [])
    trace = cluster_trace(workloads, nodes, pools, teams)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pods.csv").write_text(trace.jobs_csv())
    (out / "nodes.csv").write_text(trace.nodes_csv())
    lines = [f"{len(trace.jobs)} finished GPU jobs -> {out / 'pods.csv'}",
             f"{len(trace.nodes)} GPU nodes -> {out / 'nodes.csv'}"]  # fmt: skip
    lines += [f"left out: {count} ({reason})" for reason, count in sorted(trace.skipped.items())]
    lines.append(
        f"replay: invoke simulate --stack {spec.stack} --pods {out / 'pods.csv'} --dynamic   "
        f"(placement only: --nodes {out / 'nodes.csv'} --pods {out / 'pods.csv'})"
    )
    return "\n".join(lines)
