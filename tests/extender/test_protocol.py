"""The extender speaks k8s.io/kube-scheduler/extender/v1 exactly.

Documents are built from the upstream Go types as data: kubernetes v1.36.3
``staging/src/k8s.io/kube-scheduler/extender/v1/types.go`` and ``config/v1/types.go`` (the ``Extender`` struct),
extracted in the reference data's ``kube-scheduler/`` (see its SOURCES.md). The structs have no json tags, so
every key is the Go field name; scores run from MinExtenderPriority to MaxExtenderPriority.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from scheduler.extender import wire
from scheduler.extender.app import call, make_app
from scheduler.extender.view import ExtenderView
from scheduler.fgd.model import Workload
from scheduler.sim.policies.fgd_extender import node_object, pod_object
from tests.extender.go_types import load_types


@pytest.fixture(scope="module")
def types(shared_dir: Path) -> dict[str, Any]:
    doc = load_types(shared_dir, "extender-v1-types.yaml", "extender-v1-types.go")
    assert doc.get("source", {"release": "v1.36.3"})["release"] == "v1.36.3"
    return doc


def fields(types: dict[str, Any], name: str) -> list[str]:
    (t,) = [t for t in types["types"] if t["name"] == name]
    return [f["json"] for f in t["fields"]]


def constant(types: dict[str, Any], name: str) -> int:
    (c,) = [c for c in types["constants"] if c["name"] == name]
    return int(c["value"])


NODES = [
    node_object("gpu-a", 32000, 131072, 4, "A10", 1),
    node_object("gpu-b", 32000, 131072, 4, "A10", 1),
    node_object("gpu-c", 32000, 131072, 2, "T4", 1),
]


def app(expected: Workload | None = None) -> tuple[ExtenderView, Any]:
    view = ExtenderView(expected=expected)
    view.load_nodes(NODES)
    return view, make_app(view)


def args_doc(types, pod: dict[str, Any], names: list[str], full: bool) -> dict[str, Any]:
    """An ExtenderArgs with exactly the Go type's keys: Nodes (v1.NodeList) xor NodeNames."""
    keys = fields(types, "ExtenderArgs")
    assert keys == ["Pod", "Nodes", "NodeNames"]
    node_list = {
        "apiVersion": "v1",
        "kind": "NodeList",
        "metadata": {},
        "items": [n for n in NODES if n["metadata"]["name"] in names],
    }
    return {"Pod": pod, "Nodes": node_list if full else None, "NodeNames": None if full else names}


@pytest.mark.parametrize("full", [False, True], ids=["nodeCacheCapable-names", "full-node-objects"])
def test_filter_answers_an_extender_filter_result_in_the_form_it_was_asked(types, full: bool) -> None:
    """With nodeCacheCapable the scheduler sends and reads NodeNames, otherwise a full v1.NodeList in Nodes
    (extender/v1 ExtenderArgs/ExtenderFilterResult docs; pkg/scheduler/extender.go HTTPExtender.Filter)."""
    _, wsgi = app()
    pod = pod_object("uid-1", 1000, 1024, 3, 1000, "")  # 3 whole GPUs: gpu-c has 2
    status, result = call(wsgi, "filter", args_doc(types, pod, ["gpu-a", "gpu-b", "gpu-c"], full))
    assert status == 200
    assert set(result) <= set(fields(types, "ExtenderFilterResult"))
    assert result["Error"] == ""
    assert set(result["FailedNodes"]) == {"gpu-c"}
    if full:
        assert result["NodeNames"] is None
        assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["gpu-a", "gpu-b"]
        assert result["Nodes"]["items"][0] == NODES[0]  # the objects come back unchanged
    else:
        assert result["Nodes"] is None and result["NodeNames"] == ["gpu-a", "gpu-b"]


def test_prioritize_answers_a_host_priority_list_within_the_extender_range(types) -> None:
    """HostPriorityList = []HostPriority{Host, Score}, Score in MinExtenderPriority..MaxExtenderPriority."""
    lo, hi = constant(types, "MinExtenderPriority"), constant(types, "MaxExtenderPriority")
    assert (lo, hi) == (wire.MIN_PRIORITY, wire.MAX_PRIORITY)
    expected = Workload.build([1000] * 4, [1024] * 4, [4, 4, 4, 1], [1000] * 4)  # mostly 4-GPU pods
    view, wsgi = app(expected)
    # gpu-a already runs one 1-GPU pod: a 1-GPU pod belongs there (keeps gpu-b's four GPUs whole)
    view.pod_bound(
        "running",
        "gpu-a",
        __import__("scheduler.extender.resources", fromlist=["x"]).pod_request(
            pod_object("running", 1000, 1024, 1, 1000, "")
        ),
    )
    pod = pod_object("uid-2", 1000, 1024, 1, 1000, "")
    status, prio = call(wsgi, "prioritize", args_doc(types, pod, ["gpu-b", "gpu-a"], False))
    assert status == 200
    assert all(set(h) == set(fields(types, "HostPriority")) for h in prio)
    assert all(lo <= h["Score"] <= hi for h in prio)
    scores = {h["Host"]: h["Score"] for h in prio}
    assert scores["gpu-a"] == hi and scores["gpu-b"] < hi


def test_bind_counts_the_pod_at_once_so_the_next_pod_sees_its_gpus_taken(types) -> None:
    """ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node} -> ExtenderBindingResult{Error}."""
    assert fields(types, "ExtenderBindingArgs") == ["PodName", "PodNamespace", "PodUID", "Node"]
    bound: list[wire.BindingArgs] = []
    view, wsgi = app()
    view.binder = bound.append
    names = ["gpu-c"]
    for i in (1, 2):
        pod = pod_object(f"uid-{i}", 1000, 1024, 2, 1000, "")
        status, result = call(wsgi, "filter", args_doc(types, pod, names, False))
        if i == 2:
            assert result["NodeNames"] == [] and "gpu-c" in result["FailedNodes"]  # its 2 GPUs are taken
            break
        status, result = call(
            wsgi, "bind", {"PodName": f"uid-{i}", "PodNamespace": "t", "PodUID": f"uid-{i}", "Node": "gpu-c"}
        )
        assert (
            status == 200
            and set(result) == set(fields(types, "ExtenderBindingResult"))
            and result["Error"] == ""
        )
    assert [b.node for b in bound] == ["gpu-c"]


def test_failed_binding_gives_the_gpus_back_and_reports_the_error(types) -> None:
    view, wsgi = app()

    def refuse(_args: wire.BindingArgs) -> None:
        raise RuntimeError('pods "x" not found')

    view.binder = refuse
    pod = pod_object("uid-9", 1000, 1024, 2, 1000, "")
    call(wsgi, "filter", args_doc(types, pod, ["gpu-c"], False))
    _, result = call(wsgi, "bind", {"PodName": "x", "PodNamespace": "t", "PodUID": "uid-9", "Node": "gpu-c"})
    assert "not found" in result["Error"]
    assert view.placement("uid-9") is None
    _, again = call(
        wsgi, "filter", args_doc(types, pod_object("uid-10", 1000, 1024, 2, 1000, ""), ["gpu-c"], False)
    )
    assert again["NodeNames"] == ["gpu-c"]


def test_bad_documents_are_400_with_an_error() -> None:
    _, wsgi = app()
    status, body = call(wsgi, "filter", {"Pod": "nope"})
    assert status == 400 and "Pod" in body["Error"]
    status, body = call(wsgi, "bind", {"PodName": "x"})
    assert status == 400 and "PodUID" in body["Error"]


def test_real_http_on_loopback(types) -> None:
    """kube-scheduler POSTs application/json to urlPrefix/verb and needs HTTP 200 (extender.go send)."""

    class Quiet(WSGIRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

    _, wsgi = app()
    server = make_server("127.0.0.1", 0, wsgi, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/prioritize"
        body = json.dumps(
            args_doc(types, pod_object("u", 1000, 1024, 1, 1000, ""), ["gpu-a", "gpu-c"], False)
        )
        req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200
            prio = json.loads(resp.read())
        assert {h["Host"] for h in prio} == {"gpu-a", "gpu-c"}
    finally:
        server.shutdown()


def test_scores_map_onto_the_eleven_extender_levels_keeping_the_best_apart() -> None:
    import numpy as np

    from scheduler.extender.view import scale_scores

    assert scale_scores(np.array([50, 51, -1, 49])).tolist() == [4, 10, 0, 0]
    assert scale_scores(np.array([50, 50])).tolist() == [10, 10]  # ties stay ties
    assert scale_scores(np.array([-1, -1])).tolist() == [0, 0]
    assert scale_scores(np.array([0, 99, 100])).tolist() == [0, 8, 10]
