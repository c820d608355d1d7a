"""Which pods teach the extender its expected workload (FGD's target): the GPU pods of its own pools.

FGD measures fragmentation against the workload the pools will be asked to place (the FGD paper's target
distribution; the artifact's ``TargetPodList``, hkust-adsl/kubernetes-scheduler-simulator ``pkg/utils/frag.go``).
Without a configured trace the view learns it from the cluster, and only from pods that are that workload:

- pods asking for GPUs the view models (whole ``nvidia.com/gpu``, time-sliced ``nvidia.com/gpu.shared``):
  CPU-only pods never count, nor MIG pods, whose slices the view does not model;
- not DaemonSet pods: they follow the nodes, not the teams' demand;
- bound to a node of the extender's pools (its ``--pools``, by the ``gpufleet.io/pool`` label; every node with
  GPUs the view models when none are named), or pending for one: a pod without a node that asks for one of
  those pools (node selector or required node affinity on the pool label), or that filter or prioritize is
  asked about with one of those nodes among its candidates. Pending pods carry the shapes the pools cannot
  place yet, which a window of bound pods alone never shows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scheduler.extender.resources import NodeCapacity, PodRequest
from scheduler.fgd.model import MILLI
from scheduler.labels import POOL_LABEL

TERMINAL = ("Succeeded", "Failed")


def from_daemonset(pod: dict[str, Any]) -> bool:
    """The pod's controller is a DaemonSet (its ``ownerReferences``, as the DaemonSet controller writes them)."""
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners)


def teaches(pod: dict[str, Any], request: PodRequest) -> bool:
    """The pod may count in the expected workload wherever it runs: it asks for GPUs the view models, it can
    ever run (the device plugin refuses more than one replica a container), and no DaemonSet made it."""
    return not request.cpu_only and not request.refused_by_device_plugin and not from_daemonset(pod)


def pools_asked(pod: dict[str, Any]) -> frozenset[str] | None:
    """The pools a pod's scheduling constraints allow: its node selector's pool label, or the values of an
    ``In`` expression on it in its required node affinity (Kueue's flavor injects the selector on admission);
    None when it names none."""
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if POOL_LABEL in selector:
        return frozenset([str(selector[POOL_LABEL])])
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    values: set[str] = set()
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == POOL_LABEL and expr.get("operator") == "In":
                values.update(str(v) for v in expr.get("values") or [])
    return frozenset(values) if values else None


def manages(node: NodeCapacity, pools: frozenset[str] | None) -> bool:
    """A node of the extender's pools: its pool label is one of ``pools``; with no pools named, any node
    with GPUs the view models (whole or time-sliced; a MIG node advertises neither)."""
    if pools is None:
        return node.gpus > 0
    return node.pool in pools


def pool_sizes(nodes: Iterable[NodeCapacity], pools: frozenset[str] | None) -> dict[str, int]:
    """The extender's pools (by label; ``""`` for unlabelled GPU nodes when no pools are named) and the milli
    of one of their time-sliced replicas (1000 on whole-GPU pools), from their first node by name."""
    sizes: dict[str, int] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        if manages(node, pools):
            sizes.setdefault(node.pool, node.replica_milli())
    return sizes


def pending_milli(request: PodRequest, asked: frozenset[str] | None, sizes: dict[str, int]) -> int | None:
    """The milli per GPU entry of a pending pod's shape on the pools it may go to (one of their replicas, or
    a whole GPU); None when it may go to none of the extender's pools (or none of their nodes is known yet)."""
    names = sorted(sizes if asked is None else asked & sizes.keys())
    if not names:
        return None
    return sizes[names[0]] if request.replicas else MILLI
