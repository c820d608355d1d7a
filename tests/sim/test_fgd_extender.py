"""FGD-Extender (the extender's verbs, in-process or through its HTTP app) against the simulator's FGD on the as-deployed mapping."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.fgd.model import Workload
from scheduler.sim.deployed import as_deployed
from scheduler.sim.errors import TraceError
from scheduler.sim.policies import make_policy
from scheduler.sim.runner import replay
from tests.sim.test_properties import clusters, workloads
from tests.sim.tiny import cluster, workload


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=clusters(),
    w=workloads(),
    replicas=st.sampled_from([2, 4]),
    seed=st.integers(0, 2**16),
    http=st.booleans(),
)
def test_extender_places_every_pod_where_fgd_does_and_its_view_agrees(
    c, w: Workload, replicas, seed, http: bool
) -> None:
    """The extender's prioritize + the replay's choice of its best node is FGD on the same mapping, pod for
    pod, and the extender's own view (built from Node objects and its bind calls) holds the same allocations
    as the simulator's state: one scoring implementation, the GPUs of each pod counted at once. Whether the
    requests go through the HTTP app's JSON bytes (``http=True``, `invoke simulate --extender-http`) or to its
    verbs in-process (the default, much the faster), the placements are the same."""
    mapped, _ = as_deployed(w, replicas)
    if mapped.size == 0:
        return
    ext = make_policy("FGD-Extender", http=http)
    fgd = replay(c, mapped, "FGD", rng=np.random.default_rng(seed), share_rule="distributed")
    via = replay(c, mapped, ext, rng=np.random.default_rng(seed), share_rule="distributed")
    assert via.placements == fgd.placements
    assert ext.errors == 0
    view = ext.view._build()  # type: ignore[attr-defined]
    order = [view.index[name] for name in c.names]
    assert np.array_equal(view.state.free_gpu[order], via.state.free_gpu)
    assert np.array_equal(view.state.free_cpu[order], via.state.free_cpu)


def test_paper_world_fractions_are_refused() -> None:
    """The API has no 0.37 of a GPU: FGD-Extender needs every share to be one replica of one size."""
    c = cluster(("a", 8000, 8192, 2, "T4"))
    with pytest.raises(TraceError, match="as-deployed"):
        replay(c, workload((1000, 1024, 1, 370), (1000, 1024, 1, 500)), "FGD-Extender")


def test_extender_down_falls_back_to_the_profile_without_it() -> None:
    """``ignorable: true``: kube-scheduler skips an extender that errors (pkg/scheduler/schedule_one.go,
    findNodesThatPassExtenders / prioritizeNodes / extendersBinding at v1.36) and the profile's own
    MostAllocated scoring places the pod: every pod still lands, packed."""
    c = cluster(("a", 8000, 8192, 2, "T4"), ("b", 8000, 8192, 2, "T4"))
    pods = workload((1000, 1024, 1, 1000), (1000, 1024, 1, 1000), (1000, 1024, 1, 1000))
    pol = make_policy("FGD-Extender")

    def down(app, verb, body):  # connection refused / HTTP 500 from every replica
        return 503, {"Error": "extender unavailable"}

    original_bind = pol.bind

    def bind(ctx):
        original_bind(ctx)
        pol._call = down  # type: ignore[attr-defined]

    pol.bind = bind  # type: ignore[method-assign]
    run = replay(c, pods, pol, share_rule="distributed")
    assert run.failed == 0
    nodes = [p[0] for p in run.placements if p is not None]
    assert nodes[0] == nodes[1]  # MostAllocated packs the second pod next to the first
    assert pol.errors == 3  # type: ignore[attr-defined]
