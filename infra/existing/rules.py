"""The `existing` platform's spec rules: host groups name their hosts, GPU model and count; the AWS-only keys
are refused; the cluster is reached through a kubeconfig.

Run by the composer (`infra.rules`) before the catalog facts are resolved.
"""

from __future__ import annotations

from infra import catalog
from infra.problems import NP, duplicates, suggest
from infra.spec import ClusterSpec, NodePool


def existing_cluster_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """A Kubernetes cluster is reached through its kubeconfig (a Slurm site has none)."""
    if not spec.cluster.kubeconfig and spec.cluster.orchestrator == "kubernetes":
        problems.append(
            "gpufleet:cluster.kubeconfig: required for platform existing (path to the cluster's kubeconfig)"
        )


def existing_pool(i: int, pool: NodePool, problems: list[str]) -> NodePool:
    """One host group: hosts, GPU model and count, no AWS keys; returns it sized to its hosts."""
    at = f"{NP}[{i}]"
    if pool.instance_type is not None:
        problems.append(
            f"{at}.instanceType: only for platform aws; on existing give hosts, gpuModel, gpusPerNode"
        )
    if pool.efa:
        problems.append(f"{at}.efa: only for platform aws")
    if pool.capacity_type != "ON_DEMAND" or pool.capacity_reservation_id or pool.availability_zone:
        problems.append(f"{at}.capacityType: only for platform aws")
    for key, names in (
        ("instanceTypes", pool.instance_types),
        ("availabilityZones", pool.availability_zones),
    ):
        if names is not None:
            problems.append(f"{at}.{key}: only for platform aws")
    if not pool.hosts:
        problems.append(f"{at}.hosts: required for platform existing: a non-empty list of host names")
    elif dup := duplicates(pool.hosts):
        problems.append(f"{at}.hosts: duplicate host names: {', '.join(sorted(dup))}")
    if pool.gpu_model is None:
        problems.append(
            f"{at}.gpuModel: required for platform existing (accepted: {', '.join(catalog.GPU_MODELS)})"
        )
    elif pool.gpu_model not in catalog.GPU_MODELS:
        problems.append(
            f"{at}.gpuModel: {pool.gpu_model!r} is unknown; accepted: {', '.join(catalog.GPU_MODELS)}"
            + suggest(pool.gpu_model, list(catalog.GPU_MODELS))
        )
    if pool.gpus_per_node is None:
        problems.append(f"{at}.gpusPerNode: required for platform existing")
    n = len(pool.hosts or [])
    for key, value in (
        ("minSize", pool.min_size),
        ("desiredSize", pool.desired_size),
        ("maxSize", pool.max_size),
    ):
        if value is not None and value != n:
            problems.append(f"{at}.{key}: host groups have exactly len(hosts) = {n} nodes; remove {key}")
    return pool.model_copy(update={"min_size": n, "desired_size": n, "max_size": n})
