"""The deployed extender on GPU shares through DRA, in-process (FGD-Extender-DRA): every pod claims through a
ResourceClaim the allocator fills first fit, and goes where the simulator's FGD puts it, because the extender
scores shares, several whole devices and CPU-only pods with the simulator's one scoring code and target."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.extender import wire
from scheduler.extender.view import ExtenderView
from scheduler.fgd.state import ClusterState
from scheduler.sim.policies.extender_claims import ExtenderClaimsPolicy, claim_ask, first_fit
from scheduler.sim.policies.fgd_extender import node_object, pod_object
from scheduler.sim.protocol import seed_order
from scheduler.sim.runner import replay, run_placed
from tests.sim.tiny import cluster, workload


def test_a_claim_asks_the_shares_that_cover_a_pod_and_the_allocator_takes_the_first_devices_with_room() -> (
    None
):
    assert claim_ask(0, 0, 8) is None
    assert claim_ask(1, 300, 8) == (3, 1)
    assert claim_ask(2, 1000, 8) == (8, 2)
    assert first_fit([8, 3, 8, 8], 4, 2) == [0, 2]
    assert first_fit([8, 3, 0, 8], 8, 3) is None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_extender_on_claims_places_every_pod_where_the_simulators_fgd_does(seed: int) -> None:
    """A random mix of shares, one to four whole GPUs and CPU-only pods, on uneven nodes until they fill: the
    extender (given the workload as its trace) and the simulator's FGD choose the same node and GPUs for each."""
    c = cluster(
        ("a", 32000, 65536, 4, "T4"),
        ("b", 16000, 65536, 2, "T4"),
        ("c", 24000, 65536, 8, "T4"),
        ("d", 8000, 65536, 1, "T4"),
        ("e", 32000, 65536, 0, ""),
    )
    rng = np.random.default_rng(seed)
    shapes = [(int(rng.choice([500, 2000, 6000])), 1024, *ask) for ask in
              rng.choice(np.array([(1, 125), (1, 250), (1, 500), (1, 875), (1, 1000), (2, 1000), (4, 1000),
                                   (0, 0)]), size=40)]  # fmt: skip
    pods = workload(*[(c_, m, int(k), int(d)) for c_, m, k, d in shapes])
    fgd = replay(c, pods, "FGD", share_rule="first-fit", check=ClusterState.check)
    ext = replay(c, pods, ExtenderClaimsPolicy(), share_rule="first-fit", check=ClusterState.check)
    assert sum(p is not None for p in fgd.placements) > 10
    assert ext.placements == fgd.placements


def test_on_the_seeds_ranked_node_names_the_extender_breaks_a_tie_where_the_simulator_does() -> None:
    """Identical empty nodes tie for the first pod. The simulator takes the one of lowest random rank, the
    extender the first by name: a replay twin whose nodes carry seed_order's ranked names gets the simulator's
    node from its extender, on every seed (under the trace's names it would always get the first name)."""
    c = cluster(*[(f"n{i}", 16000, 65536, 4, "T4") for i in range(6)])
    pods = workload((2000, 1024, 1, 1000), (1000, 1024, 1, 1000))
    chosen = set()
    for seed in range(8):
        _, placed = run_placed(c, pods, "FGD", seed, share_rule="first-fit")
        assert placed[0] is not None
        names = list(seed_order(c, pods, seed)[1].names)
        view = ExtenderView(expected=pods)
        view.load_nodes(node_object(n, 16000, 65536, 4, "T4", 1) for n in names)
        first = pod_object("pod-0", 2000, 1024, 1, 1000, "")
        scored = view.prioritize(wire.parse_args({"Pod": first, "Nodes": None, "NodeNames": names}))
        top = [h["Host"] for h in scored if h["Score"] == wire.MAX_PRIORITY]
        assert [n.split("-", 1)[1] for n in top] == [placed[0][0]], seed
        chosen.add(placed[0][0])
    assert len(chosen) > 1  # the simulator's node is not the first by the trace's names on every seed
