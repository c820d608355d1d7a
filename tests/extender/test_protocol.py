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
from scheduler.extender.resources import pod_request
from scheduler.extender.view import ExtenderView
from scheduler.extender.watch import apply_pod_event
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


def free_gpus(view: ExtenderView, node: str) -> list[int]:
    built = view._build()
    return built.state.free_gpu[built.index[node]].tolist()


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


def bound(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """The pod as the extender's watch delivers it once kube-scheduler's Binding is applied."""
    return {**pod, "spec": {**pod["spec"], "nodeName": node}, "status": {"phase": "Pending"}}


def test_a_pod_filtered_to_one_node_is_counted_there_before_its_binding(types) -> None:
    """One feasible node after the extender's filter: kube-scheduler binds the pod there without prioritize
    (v1.35.8 schedule_one.go schedulePod), so the next pod already sees those GPUs taken."""
    _, wsgi = app()
    _, first = call(
        wsgi, "filter", args_doc(types, pod_object("uid-1", 1000, 1024, 2, 1000, ""), ["gpu-c"], False)
    )
    assert first["NodeNames"] == ["gpu-c"]
    _, second = call(
        wsgi, "filter", args_doc(types, pod_object("uid-2", 1000, 1024, 2, 1000, ""), ["gpu-c"], False)
    )
    assert second["NodeNames"] == [] and "gpu-c" in second["FailedNodes"]  # uid-1 holds its 2 GPUs


def test_a_prioritized_pod_is_counted_on_its_best_node_and_the_watch_moves_it(types) -> None:
    """The best-scored node wins by weight x 10 x 10 points (prioritizeNodes); among equals the scheduler picks
    at random, so the watch, which sees where the Binding put the pod, has the last word."""
    view, wsgi = app()
    pod = pod_object("uid-1", 1000, 1024, 2, 1000, "")
    _, prio = call(wsgi, "prioritize", args_doc(types, pod, ["gpu-a", "gpu-b"], False))
    best = max(prio, key=lambda h: h["Score"])["Host"]
    other = ({"gpu-a", "gpu-b"} - {best}).pop()
    assert view.placement("uid-1")[0] == best and view.assumed.keys() == {"uid-1"}
    apply_pod_event(view, "MODIFIED", bound(pod, other))  # the scheduler chose the other equal node
    assert view.placement("uid-1")[0] == other and not view.assumed and view.moved == 1
    assert sorted(free_gpus(view, best)) == [1000] * 4 and sorted(free_gpus(view, other)) == [
        0,
        0,
        1000,
        1000,
    ]
    view._build().state.check()


def test_a_retried_pod_does_not_find_its_gpus_taken_by_itself(types) -> None:
    view, wsgi = app()
    pod = pod_object("uid-1", 1000, 1024, 2, 1000, "")
    call(wsgi, "filter", args_doc(types, pod, ["gpu-c"], False))  # assumed on gpu-c; its binding cycle fails
    _, again = call(wsgi, "filter", args_doc(types, pod, ["gpu-c"], False))
    assert again["NodeNames"] == ["gpu-c"] and view.placement("uid-1")[0] == "gpu-c"


def test_an_assumption_the_watch_never_confirms_lapses_and_a_confirmed_pod_stays(types) -> None:
    from scheduler.extender.view import ASSUMED_TTL_S

    view, _ = app()
    lost, kept = (pod_object(u, 1000, 1024, 2, 1000, "") for u in ("uid-lost", "uid-kept"))
    view.assume("uid-lost", "gpu-c", pod_request(lost), now=0.0)
    view.assume("uid-kept", "gpu-a", pod_request(kept), now=0.0)
    apply_pod_event(view, "MODIFIED", bound(kept, "gpu-a"))
    view.expire(now=ASSUMED_TTL_S - 1)
    assert view.placement("uid-lost") is not None
    view.expire(now=ASSUMED_TTL_S)
    assert view.placement("uid-lost") is None and free_gpus(view, "gpu-c")[:2] == [
        1000,
        1000,
    ]  # a T4 node: 2 GPUs
    assert view.placement("uid-kept") is not None


def test_bad_documents_are_400_with_an_error() -> None:
    _, wsgi = app()
    status, body = call(wsgi, "filter", {"Pod": "nope"})
    assert status == 400 and "Pod" in body["Error"]
    status, body = call(wsgi, "bind", {"PodName": "x"})
    assert status == 404  # no bind verb: kube-scheduler binds


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
    assert scale_scores(np.array([50, 50])).tolist() == [
        10,
        9,
    ]  # one node only: where the view counts the pod
    assert scale_scores(np.array([-1, 7, 7, 3])).tolist() == [0, 10, 9, 0]
    assert scale_scores(np.array([-1, -1])).tolist() == [0, 0]
    assert scale_scores(np.array([-1, 7, 7, 3]), single=False).tolist() == [0, 10, 10, 0]  # a MIG pod
    assert scale_scores(np.array([0, 99, 100])).tolist() == [0, 7, 10]


def test_readyz_counts_the_pods_seen_bound_apart_from_those_assumed(types) -> None:
    """What a test waits on instead of sleeping: the watch has shown every pod bound, none is only assumed."""
    view, wsgi = app()
    view.listed("nodes")
    view.listed("pods")
    pod = pod_object("uid-1", 1000, 1024, 2, 1000, "")
    call(wsgi, "filter", args_doc(types, pod, ["gpu-c"], False))

    def readyz() -> dict[str, int]:
        out: list[str] = []
        body = b"".join(wsgi({"REQUEST_METHOD": "GET", "PATH_INFO": "/readyz"}, lambda s, _h: out.append(s)))
        assert out == ["200 OK"]
        return json.loads(body)

    assert readyz() == {"nodes": 3, "pods": 0, "assumed": 1, "moved": 0}
    apply_pod_event(view, "MODIFIED", bound(pod, "gpu-c"))
    assert readyz() == {"nodes": 3, "pods": 1, "assumed": 0, "moved": 0}
