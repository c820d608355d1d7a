"""The `existing` platform's spec rules: host groups name their hosts, GPU model and count; the AWS-only keys
are refused; the cluster is reached through a kubeconfig.

Run by the composer (`infra.rules`) before the catalog facts are resolved.
"""

from __future__ import annotations

import re

from infra import catalog
from infra.problems import NP, suggest
from infra.spec import HOST_NAME, NODE_NAME, ClusterSpec, NodePool


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


def host_problems(spec: ClusterSpec, problems: list[str]) -> None:
    """Every host is in one pool, once, under a name its orchestrator accepts.

    A host listed twice counts its GPUs twice in the plan and the quotas, gets two `NodeName` lines in
    slurm.conf (slurmctld stops at start: SchedMD/slurm@slurm-22-05-8-1 src/common/read_config.c, "Duplicated
    NodeName %s in the config file", fatal) and two node patches of one name in the Pulumi program (a duplicate
    URN: the preview fails). Host names compare case-insensitively, as DNS names do."""
    first: dict[str, str] = {}
    kubernetes = spec.cluster.orchestrator == "kubernetes"
    pattern, accepted = (
        (NODE_NAME, "a Kubernetes node name: lowercase letters, digits, '-' and '.' (a DNS subdomain)")
        if kubernetes
        else (HOST_NAME, "a host name: letters, digits, '-' and '.'")
    )
    for i, pool in enumerate(spec.node_pools):
        for j, host in enumerate(pool.hosts or []):
            at = f"{NP}[{i}].hosts[{j}]"
            if not re.fullmatch(pattern, host) or len(host) > 253:
                lower = kubernetes and re.fullmatch(pattern, host.lower())
                problems.append(
                    f"{at}: {host!r} is not {accepted}" + (f"; e.g. {host.lower()!r}" if lower else "")
                )
            key = host.lower()
            if key in first:
                problems.append(
                    f"{at}: {host} is already listed at {first[key]}; a host belongs to one pool, once: remove "
                    "one of the two"
                )
            else:
                first[key] = f"{NP}[{i}].hosts[{j}] (pool {pool.name!r})"
