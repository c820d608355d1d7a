"""The extender wire format: ``k8s.io/kube-scheduler/extender/v1`` (kubernetes v1.36.3, ``extender/v1/types.go``).

The Go structs have no json tags, so the JSON keys are the Go field names (``Pod``, ``Nodes``, ``NodeNames``,
``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``, ``Host``, ``Score``). The scheduler sends exactly these keys and matches keys case-insensitively when it
decodes a reply (``encoding/json``). With ``nodeCacheCapable: true`` it sends ``NodeNames`` and reads
``NodeNames`` back; otherwise a full ``v1.NodeList`` in ``Nodes``. Scores run from ``MinExtenderPriority`` 0 to
``MaxExtenderPriority`` 10.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

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
    if not isinstance(names, list) or not set(map(type, names)) <= {str}:
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


_SCORE_TAIL = [f"{s}}}" for s in range(MAX_PRIORITY + 1)]  # "7}" closes {"Host":"n","Score":7}
_HOST_HEAD: dict[str, str] = {}  # node name -> '{"Host":"<name>","Score":', JSON-escaped once
_HEAD_MAX = 200_000


def _head(host: str) -> str:
    head = _HOST_HEAD.get(host)
    if head is None:
        if len(_HOST_HEAD) >= _HEAD_MAX:
            _HOST_HEAD.clear()
        head = _HOST_HEAD[host] = '{"Host":' + json.dumps(host) + ',"Score":'
    return head


class HostPriorityList(Sequence[dict[str, Any]]):
    """A HostPriorityList, ``[{"Host": name, "Score": 0..10}]``: a sequence of those dicts, and its JSON text
    written straight from the names and scores (a 10,000-node reply is the extender's largest cost otherwise:
    benchmarks/extender_bench.py)."""

    def __init__(self, hosts: list[str], scores: list[int]) -> None:
        if len(hosts) != len(scores):
            raise ValueError("one score per host")
        if scores and not MIN_PRIORITY <= min(scores) <= max(scores) <= MAX_PRIORITY:
            bad = next(s for s in scores if not MIN_PRIORITY <= s <= MAX_PRIORITY)
            raise ValueError(f"extender score {bad} is outside {MIN_PRIORITY}..{MAX_PRIORITY}")
        self.hosts, self.scores = hosts, scores

    def __len__(self) -> int:
        return len(self.hosts)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [{"Host": h, "Score": s} for h, s in zip(self.hosts[i], self.scores[i], strict=True)]
        return {"Host": self.hosts[i], "Score": self.scores[i]}

    def json_bytes(self) -> bytes:
        body = ",".join(map(str.__add__, map(_head, self.hosts), map(_SCORE_TAIL.__getitem__, self.scores)))
        return f"[{body}]".encode()


def host_priority_list(hosts: list[str], scores: list[int]) -> HostPriorityList:
    return HostPriorityList(hosts, scores)
