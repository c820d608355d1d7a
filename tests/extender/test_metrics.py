"""The extender's /metrics and its shadow mode, on a cluster small enough to work out by hand.

Two 8-GPU H100 nodes of pool `h100`: `h100-a` runs three 2-GPU pods (2 GPUs free), `h100-b` two (4 free); the
pods teach the view a target of 2-GPU pods. A 1-GPU pod: MostAllocated packs it onto `h100-a` (7 of 8 GPUs
requested against 5 of 8), FGD onto `h100-b`, where the 3 GPUs left still hold a 2-GPU pod, while `h100-a`
would keep one GPU no 2-GPU pod can use.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.extender import wire
from scheduler.extender.app import call, make_app
from scheduler.extender.layout import most_allocated
from scheduler.extender.view import ExtenderView
from scheduler.extender.watch import apply_pod_event, replace_nodes, replace_pods
from tests.extender.test_target import node, pod

NAMES = ["h100-a", "h100-b"]


def scrape(app: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics, parsed by prometheus_client's own text parser: {(sample name, labels): value}."""
    status: list[str] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "wsgi.input": io.BytesIO()}
    body = b"".join(app(environ, lambda s, _h: status.append(s)))
    assert status == ["200 OK"]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}  # fmt: skip


def view_with_pods(shadow: bool) -> ExtenderView:
    view = ExtenderView(pools=["h100"], shadow=shadow)
    replace_nodes(view, [node("h100-a", "h100", 8), node("h100-b", "h100", 8), node("cpu-0", None, 0)])
    bound = [pod(f"a{i}", "1", gpus=2, node_name="h100-a") for i in range(3)]
    bound += [pod(f"b{i}", "1", gpus=2, node_name="h100-b") for i in range(2)]
    replace_pods(view, bound)
    return view


@pytest.mark.parametrize("shadow", [False, True])
def test_prioritize_counts_where_fgd_leaves_the_profile_and_shadow_mode_only_counts(shadow: bool) -> None:
    view = view_with_pods(shadow)
    app = make_app(view)
    one = pod("one", "1", gpus=1, pool="h100")
    status, ranked = call(app, "prioritize", {"Pod": one, "NodeNames": NAMES})
    assert status == 200
    scores = {h["Host"]: h["Score"] for h in ranked}
    if shadow:
        assert scores == {"h100-a": 0, "h100-b": 0}  # equal: the profile's MostAllocated decides
        assert view.placement("one") is None  # nothing assumed: the watch will say where it went
    else:
        assert scores == {"h100-a": 0, "h100-b": 10}
        assert view.placement("one") is not None and view.placement("one")[0] == "h100-b"  # type: ignore[index]
    got = scrape(app)
    assert got[("gpufleet_extender_prioritize_total", ())] == 1
    assert got[("gpufleet_extender_compared_total", ())] == 1
    assert got[("gpufleet_extender_disagreements_total", ())] == 1
    assert got[("gpufleet_extender_shadow", ())] == int(shadow)


def test_a_pod_both_would_place_alike_is_no_disagreement() -> None:
    """A 2-GPU pod: MostAllocated and FGD both fill `h100-a` (no GPU left there to strand)."""
    view = view_with_pods(shadow=True)
    app = make_app(view)
    call(app, "prioritize", {"Pod": pod("two", "1", gpus=2, pool="h100"), "NodeNames": NAMES})
    got = scrape(app)
    assert got[("gpufleet_extender_compared_total", ())] == 1
    assert got[("gpufleet_extender_disagreements_total", ())] == 0


def test_the_fragmentation_gauges_are_fgds_measure_of_the_pools_nodes() -> None:
    """After the profile put the 1-GPU pod on `h100-a` (shadow mode, the watch reports it): its one free GPU
    cannot hold a 2-GPU pod, so 1 GPU is fragmented; `h100-b`'s 4 free GPUs all can. The CPU node is no pool's."""
    view = view_with_pods(shadow=True)
    app = make_app(view)
    one = pod("one", "1", gpus=1, pool="h100")
    call(app, "prioritize", {"Pod": one, "NodeNames": NAMES})
    apply_pod_event(view, "MODIFIED", pod("one", "1", gpus=1, node_name="h100-a", pool="h100"))
    got = scrape(app)
    pool = (("pool", "h100"),)
    assert got[("gpufleet_extender_fragmented_gpus", pool)] == pytest.approx(1.0)
    assert got[("gpufleet_extender_unallocated_gpus", pool)] == 5
    assert got[("gpufleet_extender_gpus", pool)] == 16
    assert {labels for name, labels in got if name == "gpufleet_extender_gpus"} == {pool}


def test_the_profile_score_is_the_simulators_most_allocated() -> None:
    """The view's MostAllocated equals the simulator's NodeResourcesFit MostAllocated (weights cpu 1, memory 1,
    GPU 10) on random whole-GPU states: the disagreement counts against the profile the simulator replays."""
    from scheduler.extender.resources import NodeCapacity, PodRequest
    from scheduler.fgd.model import Cluster, Workload
    from tests.sim.tiny import node_scores

    rng = np.random.default_rng(7)
    for _ in range(20):
        n = 6
        cpu, mem, gpus = (
            rng.choice([32000, 96000], n),
            rng.choice([256000, 1000000], n),
            rng.choice([4, 8], n),
        )
        names = [f"n{i}" for i in range(n)]
        cluster = Cluster.build(names, cpu, mem, gpus, ["H100"] * n)
        view = ExtenderView(pools=["p"])
        view.load_nodes(NodeCapacity(m, int(c), int(r), int(g), 1, "H100", "p")
                        for m, c, r, g in zip(names, cpu, mem, gpus, strict=True))  # fmt: skip
        allocations = []
        for j in range(12):
            i, k = int(rng.integers(n)), int(rng.integers(1, 3))
            c, r = int(rng.integers(1, 8)) * 1000, int(rng.integers(1, 64)) * 1024
            built = view._build()
            free = built.state.fully_free_gpus(i, k)
            if len(free) < k or built.state.free_cpu[i] < c or built.state.free_mem[i] < r:
                continue
            view.pod_bound(f"p{j}", names[i], PodRequest(c, r, k, 0, ()))
            allocations.append((i, c, r, view.placement(f"p{j}")[1], 1000))  # type: ignore[index]
        shape = (2000, 8192, 1, 1000, "")
        expected, _ = node_scores(cluster, Workload.build([2000], [8192], [1], [1000], [""]), "MostAllocated",
                                  shape, allocations)  # fmt: skip
        built = view._build()
        got = most_allocated(
            built, np.array([built.index[m] for m in names]), PodRequest(2000, 8192, 1, 0, ())
        )
        feasible = np.array(expected) >= 0
        assert len(allocations) >= 6 and feasible.any()
        assert got[feasible].tolist() == np.array(expected)[feasible].tolist()


def test_filter_and_prioritize_on_the_wire_still_answer_in_shadow_mode() -> None:
    view = view_with_pods(shadow=True)
    result = view.filter(wire.parse_args({"Pod": pod("one", "1", gpus=1, pool="h100"), "NodeNames": NAMES}))
    assert sorted(result["NodeNames"]) == NAMES  # filter still keeps out nodes without room; both have room


def test_the_pod_network_listener_serves_the_metrics_and_no_verb() -> None:
    """``--metrics-port``'s app, served over real HTTP on loopback: the same series as the verbs' listener, and
    404 for filter and prioritize, so a pod that reaches the scrape port cannot feed the view pods."""
    import threading
    import urllib.error
    import urllib.request
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from scheduler.extender.__main__ import _Server
    from scheduler.extender.app import metrics_app

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    view = view_with_pods(shadow=True)
    call(make_app(view), "prioritize", {"Pod": pod("one", "1", gpus=1, pool="h100"), "NodeNames": NAMES})
    server = make_server("127.0.0.1", 0, metrics_app(view), server_class=_Server, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as reply:
            body = reply.read().decode()
        served = {(s.name, tuple(sorted(s.labels.items()))): s.value
                  for f in text_string_to_metric_families(body) for s in f.samples}  # fmt: skip
        assert served == scrape(make_app(view))
        assert served[("gpufleet_extender_disagreements_total", ())] == 1.0
        for verb in ("filter", "prioritize"):
            request = urllib.request.Request(f"{base}/{verb}", data=b"{}", method="POST")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
