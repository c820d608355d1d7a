"""The extender wire format: ``k8s.io/kube-scheduler/extender/v1`` (kubernetes v1.36.3, ``extender/v1/types.go``).

The Go structs have no json tags, so the JSON keys are the Go field names (``Pod``, ``Nodes``, ``NodeNames``,
``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``, ``Host``, ``Score``, ``PodName``, ``PodNamespace``,
``PodUID``, ``Node``). The scheduler sends exactly these keys and matches keys case-insensitively when it
decodes a reply (``encoding/json``). With ``nodeCacheCapable: true`` it sends ``NodeNames`` and reads
``NodeNames`` back; otherwise a full ``v1.NodeList`` in ``Nodes``. Scores run from ``MinExtenderPriority`` 0 to
``MaxExtenderPriority`` 10.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_PRIORITY = 0  # MinExtenderPriority
MAX_PRIORITY = 10  # MaxExtenderPriority


class WireError(ValueError):
    """A request body that is not the document the verb expects (HTTP 400)."""


def _get(doc: dict[str, Any], key: str) -> Any:
    """A field by its Go name, matched case-insensitively as Go's encoding/json does."""
    if key in doc:
        return doc[key]
    lower = key.lower()
    for k, v in doc.items():
        if k.lower() == lower:
            return v
    return None


@dataclass(frozen=True)
class ExtenderArgs:
    """A filter or prioritize request: the pod and its candidate nodes, by name or as full objects."""

    pod: dict[str, Any]
    node_names: list[str]
    nodes: list[dict[str, Any]] | None  # full v1.Node objects when the scheduler is not nodeCacheCapable

    @property
    def cache_capable(self) -> bool:
        return self.nodes is None


def parse_args(doc: Any) -> ExtenderArgs:
    if not isinstance(doc, dict):
        raise WireError("ExtenderArgs must be a JSON object")
    pod = _get(doc, "Pod")
    if not isinstance(pod, dict):
        raise WireError("ExtenderArgs.Pod must be a v1.Pod object")
    node_list = _get(doc, "Nodes")
    names = _get(doc, "NodeNames")
    if node_list is not None:
        items = node_list.get("items") if isinstance(node_list, dict) else None
        if not isinstance(items, list):
            raise WireError("ExtenderArgs.Nodes must be a v1.NodeList with items")
        return ExtenderArgs(pod, [str(n.get("metadata", {}).get("name", "")) for n in items], items)
    if names is None:
        names = []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise WireError("ExtenderArgs.NodeNames must be a list of node names")
    return ExtenderArgs(pod, names, None)


def filter_result(
    args: ExtenderArgs,
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    error: str = "",
) -> dict[str, Any]:
    """An ExtenderFilterResult answering ``args`` in the same form (names, or the passing Node objects)."""
    result: dict[str, Any] = {
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }
    if args.nodes is None:
        result["Nodes"] = None
        result["NodeNames"] = passed
    else:
        keep = set(passed)
        result["Nodes"] = {
            "apiVersion": "v1",
            "kind": "NodeList",
            "items": [n for n in args.nodes if n.get("metadata", {}).get("name") in keep],
        }
        result["NodeNames"] = None
    return result


def host_priority_list(scores: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """A HostPriorityList: ``[{"Host": name, "Score": 0..10}]``."""
    out = []
    for host, score in scores:
        if not MIN_PRIORITY <= score <= MAX_PRIORITY:
            raise ValueError(f"extender score {score} for {host} is outside {MIN_PRIORITY}..{MAX_PRIORITY}")
        out.append({"Host": host, "Score": int(score)})
    return out


@dataclass(frozen=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def parse_binding(doc: Any) -> BindingArgs:
    if not isinstance(doc, dict):
        raise WireError("ExtenderBindingArgs must be a JSON object")
    values = {k: _get(doc, k) for k in ("PodName", "PodNamespace", "PodUID", "Node")}
    missing = [k for k, v in values.items() if not isinstance(v, str) or not v]
    if missing:
        raise WireError(f"ExtenderBindingArgs needs {', '.join(missing)}")
    return BindingArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


def binding_result(error: str = "") -> dict[str, Any]:
    return {"Error": error}
