"""Whether a pod fits a node, in the scheduler's own words: what cluster-autoscaler asks of a node group's template
before it scales the group up.

cluster-autoscaler runs the scheduler's filter plugins against each group's template node (cluster-autoscaler
1.35.2 core/scaleup/orchestrator/orchestrator.go, `ComputeExpansionOption`) and reports a rejected group with
the plugins' messages (processors/status/eventing_scale_up_processor.go `ReasonsMessage`). The three filters
gpufleet's pools differ by are played here with kube-scheduler v1.36.4's messages:
- TaintToleration: "node(s) had untolerated taint(s)" (pkg/scheduler/framework/plugins/tainttoleration/
  taint_toleration.go:131), for NoSchedule and NoExecute taints;
- NodeAffinity: "node(s) didn't match Pod's node affinity/selector" (nodeaffinity/node_affinity.go:64), for
  `nodeSelector` and required node affinity;
- NodeResourcesFit: "Insufficient <resource>" (noderesources/fit.go:755), for every requested resource and
  the pod count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

UNTOLERATED = "node(s) had untolerated taint(s)"
NOT_SELECTED = "node(s) didn't match Pod's node affinity/selector"


def quantity(value: Any) -> float:
    from kubernetes.utils import parse_quantity

    return float(parse_quantity(str(value))) if value is not None else 0.0


def _container_requests(container: Mapping[str, Any]) -> dict[str, float]:
    res = container.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}  # a request defaults to its limit
    return {name: quantity(value) for name, value in merged.items()}


def pod_requests(spec: Mapping[str, Any]) -> dict[str, float]:
    """A pod's effective requests: its containers summed, or its largest init container where that is more (the
    scheduler's rule, kubernetes.io "Init Containers": effective request), plus the pod itself."""
    total: dict[str, float] = {"pods": 1.0}
    for container in spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, 0.0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = max(total.get(name, 0.0), amount)
    return total


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """kubernetes.io "Taints and Tolerations": an empty key with Exists matches every taint; an empty effect
    every effect; Exists any value, Equal (the default) the same value."""
    key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if not key and operator != "Exists":
        return False
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated(spec: Mapping[str, Any], taints: Iterable[Mapping[str, Any]]) -> bool:
    tolerations = spec.get("tolerations") or []
    return any(
        t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(tol, t) for tol in tolerations)
        for t in taints
    )


def _expression_holds(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], list(expr.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        try:
            have, bound = int(labels[key]), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def selected(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """`nodeSelector` and every required node-affinity term (any one term, all its expressions)."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(
        all(_expression_holds(e, labels) for e in term.get("matchExpressions") or []) for term in terms
    )


def rejections(
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, Any]],
    allocatable: Mapping[str, float],
    requests: bool = True,
) -> list[str]:
    """Why the pod cannot go on an empty node of this shape, in the scheduler's words; empty: it fits
    (`requests=False`: by its taints and labels alone)."""
    out = []
    if untolerated(spec, taints):
        out.append(UNTOLERATED)
    if not selected(spec, labels):
        out.append(NOT_SELECTED)
    for name, amount in sorted(pod_requests(spec).items()) if requests else ():
        if amount and allocatable.get(name, 0.0) < amount:
            out.append(f"Insufficient {name}")
    return out


def fits(request: Mapping[str, float], free: Mapping[str, float]) -> bool:
    return all(free.get(name, 0.0) >= amount for name, amount in request.items() if amount)


def take(request: Mapping[str, float], free: dict[str, float]) -> None:
    for name, amount in request.items():
        free[name] = free.get(name, 0.0) - amount


def place(
    requests: Sequence[Mapping[str, float]],
    free: Sequence[Mapping[str, float]],
    template: Mapping[str, float],
    room: int,
) -> tuple[int, list[int], list[dict[str, float]]]:
    """First-fit of the pods onto the nodes' free room, then onto new template nodes (at most `room`), as
    cluster-autoscaler's binpacking estimator does (estimator/binpacking_estimator.go): (new nodes, the indexes
    of the pods that found a place, the rooms left, new nodes included). The placed pods are the option's pods
    (`expander.Option.Pods`), which an all-or-nothing scale-up compares with all it was asked for."""
    spaces = [dict(f) for f in free]
    added, placed = 0, []
    for i, request in enumerate(requests):
        spot = next((s for s in spaces if fits(request, s)), None)
        if spot is None:
            if not fits(request, template) or added >= room:
                continue
            spot = dict(template)
            spaces.append(spot)
            added += 1
        take(request, spot)
        placed.append(i)
    return added, placed, spaces


def new_nodes(
    requests: Iterable[Mapping[str, float]],
    free: Sequence[Mapping[str, float]],
    template: Mapping[str, float],
    room: int,
) -> tuple[int, int]:
    """`place`, counted: (new nodes, pods that found no place)."""
    asked = list(requests)
    added, placed, _rooms = place(asked, free, template, room)
    return added, len(asked) - len(placed)
