"""The extender's view fed by watch events (as the kubernetes client's watch delivers them, as dicts)."""

from __future__ import annotations

from scheduler.extender.view import ExtenderView
from scheduler.extender.watch import apply_node_event, apply_pod_event
from scheduler.sim.policies.fgd_extender import node_object, pod_object


def bound(uid: str, node: str, gpus: int = 0, milli: int = 1000, phase: str = "Running") -> dict:
    pod = pod_object(uid, 1000, 1024, gpus, milli, "")
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase}
    return pod


def free(view: ExtenderView, node: str) -> list[int]:
    built = view._build()
    return built.state.free_gpu[built.index[node]].tolist()


def test_pods_follow_the_watch_and_leave_when_finished_or_deleted() -> None:
    view = ExtenderView()
    apply_node_event(view, "ADDED", node_object("n1", 8000, 16384, 2, "A10", 2))
    apply_pod_event(view, "ADDED", bound("p1", "n1", 1, 1000))
    apply_pod_event(view, "ADDED", bound("p2", "n1", 1, 500))  # one replica of 2: 500 milli
    assert sorted(free(view, "n1")) == [0, 500]
    apply_pod_event(view, "MODIFIED", bound("p2", "n1", 1, 500))  # the same pod again: counted once
    assert sorted(free(view, "n1")) == [0, 500]
    apply_pod_event(view, "MODIFIED", bound("p1", "n1", 1, 1000, phase="Succeeded"))
    assert sorted(free(view, "n1")) == [500, 1000]
    apply_pod_event(view, "DELETED", bound("p2", "n1", 1, 500))
    assert free(view, "n1") == [1000, 1000]
    view._build().state.check()


def test_pods_seen_before_their_node_count_when_it_arrives() -> None:
    view = ExtenderView()
    apply_pod_event(view, "ADDED", bound("p1", "late", 2))
    apply_node_event(view, "ADDED", node_object("late", 8000, 16384, 2, "A10", 1))
    assert free(view, "late") == [0, 0]
    apply_node_event(view, "DELETED", node_object("late", 8000, 16384, 2, "A10", 1))
    assert view.placement("p1") is None and "late" not in view.nodes


def test_replicas_spread_as_the_device_plugin_spreads_them() -> None:
    """NVIDIA k8s-device-plugin distributedAlloc: the GPU with the fewest allocated replicas first."""
    view = ExtenderView()
    apply_node_event(view, "ADDED", node_object("n1", 8000, 16384, 2, "A10", 4))
    for i in range(3):
        apply_pod_event(view, "ADDED", bound(f"r{i}", "n1", 1, 250))
    assert sorted(free(view, "n1")) == [500, 750]  # 2 replicas on one GPU, 1 on the other


def test_a_relist_drops_what_disappeared_between_two_watches() -> None:
    """A pod deleted (or a node removed) while no watch ran is gone from the next
    list; the view must drop it, as client-go's reflector `Replace` does, or the GPUs stay taken forever."""
    from scheduler.extender.watch import replace_nodes, replace_pods

    view = ExtenderView()
    nodes = [node_object("n1", 8000, 16384, 2, "A10", 1), node_object("n2", 8000, 16384, 2, "A10", 1)]
    replace_nodes(view, nodes)
    replace_pods(view, [bound("gone", "n1", 2), bound("stays", "n2", 1)])
    assert view.ready
    replace_pods(view, [bound("stays", "n2", 1)])  # "gone" was deleted while the watch was down
    assert view.placement("gone") is None and free(view, "n1") == [1000, 1000]
    replace_nodes(view, nodes[1:])
    assert "n1" not in view.nodes and view.placement("stays") is not None
    view._build().state.check()


def test_a_pod_assumed_before_its_binding_survives_a_list_that_cannot_show_it_bound() -> None:
    from scheduler.extender import wire
    from scheduler.extender.watch import replace_nodes, replace_pods

    view = ExtenderView()
    replace_nodes(view, [node_object("n1", 8000, 16384, 2, "A10", 1)])
    replace_pods(view, [])
    pod = pod_object("fresh", 1000, 1024, 1, 1000, "")
    view.filter(wire.parse_args({"pod": pod, "nodenames": ["n1"]}))  # one node: the scheduler binds it there
    replace_pods(view, [])  # a relist while the Binding is in flight
    assert view.placement("fresh") is not None
    replace_pods(view, [bound("fresh", "n1", 1)])  # the Binding applied: confirmed, counted once
    assert not view.assumed and sorted(free(view, "n1")) == [0, 1000]


def test_ready_only_after_both_lists() -> None:
    from scheduler.extender.watch import replace_nodes, replace_pods

    view = ExtenderView()
    replace_nodes(view, [node_object("n1", 8000, 16384, 2, "A10", 1)])
    assert not view.ready  # nodes known, pods not yet: answers would ignore every running pod
    replace_pods(view, [])
    assert view.ready
