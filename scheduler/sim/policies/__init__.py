"""Placement policies, one module each; importing this package registers them all."""

from scheduler.sim.policies import (
    best_fit,
    dot_prod,
    extender_claims,
    fgd,
    fgd_extender,
    gpu_clustering,
    gpu_packing,
    least_allocated,
    most_allocated,
    random_pick,
    round_robin,
)
from scheduler.sim.policies.base import REGISTRY, Batch, Context, Policy, make_policy, register

PAPER_POLICIES = ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD")
ALL_POLICIES = (*PAPER_POLICIES, "RoundRobin", "LeastAllocated", "MostAllocated")

__all__ = [
    "ALL_POLICIES",
    "PAPER_POLICIES",
    "REGISTRY",
    "Batch",
    "Context",
    "Policy",
    "best_fit",
    "dot_prod",
    "extender_claims",
    "fgd",
    "fgd_extender",
    "gpu_clustering",
    "gpu_packing",
    "least_allocated",
    "make_policy",
    "most_allocated",
    "random_pick",
    "register",
    "round_robin",
]
