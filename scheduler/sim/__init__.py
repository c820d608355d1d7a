"""Trace simulator: replay GPU pod traces against placement policies and measure GPU fragmentation.

Pure Python and numpy (no cluster, no cloud). The public API:

- :func:`read_nodes` / :func:`read_pods` -> :class:`Cluster` / :class:`Workload` (openb trace format or a
  generic ``cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]`` pod CSV); bad input raises :class:`TraceError`
  naming the file and row.
- :func:`run_one(cluster, workload, policy, seed) <run_one>` -> :class:`RunResult`: one replay of the FGD
  paper's protocol (shuffle by seed, inflate to 1.3x GPU capacity, place pods one by one, never remove them),
  with 131-value curves (allocated GPU %, fragmentation amount % and ratio % per arrived % 0..130).
- :func:`run_many(cluster, workload, policies, seeds, processes=None, on_done=None) <run_many>` -> list of
  results, runs spread over processes; ``on_done(result)`` fires as each finishes (for a progress bar).
- :data:`ALL_POLICIES` / :data:`PAPER_POLICIES`: registered policy names (see ``scheduler.sim.policies``).

Example::

    cluster = read_nodes("openb_node_list_gpu_node.csv")
    pods = read_pods("openb_pod_list_default.csv")
    results = run_many(cluster, pods, ["FGD", "BestFit"], seeds=[42, 43])
    print({(r.policy, r.seed): r.unallocated(100) for r in results})
"""

from scheduler.fgd.model import Cluster, Workload
from scheduler.fgd.state import ClusterState
from scheduler.sim.errors import TraceError, UnknownPolicyError
from scheduler.sim.policies import ALL_POLICIES, PAPER_POLICIES, REGISTRY, Policy, make_policy, register
from scheduler.sim.runner import DEFAULT_SEEDS, RunResult, mean_curve, run_many, run_one
from scheduler.sim.traces import read_nodes, read_pods

__all__ = [
    "ALL_POLICIES",
    "DEFAULT_SEEDS",
    "PAPER_POLICIES",
    "REGISTRY",
    "Cluster",
    "ClusterState",
    "Policy",
    "RunResult",
    "TraceError",
    "UnknownPolicyError",
    "Workload",
    "make_policy",
    "mean_curve",
    "read_nodes",
    "read_pods",
    "register",
    "run_many",
    "run_one",
]
