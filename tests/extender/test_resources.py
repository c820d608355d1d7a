"""The extender counts what Kubernetes counts, driven through ExtenderView and the watch handlers with v1.Pod /
v1.Node documents.

Upstream rules encoded here:
- a pod's request: k8s.io/component-helpers v0.35.8 ``resource/helpers.go`` ``PodRequests`` (:149-184) and
  ``AggregateContainerRequests`` (:191-278; sidecars :255-261, overhead :179-182, pod-level requests :155-176),
  what kube-scheduler v1.35.8 NodeResourcesFit counts (``pkg/scheduler/framework/plugins/noderesources/fit.go``
  ``computePodResourceRequest``) against the node's allocatable;
- time-sliced replicas: NVIDIA/k8s-device-plugin ``internal/plugin/server.go`` ``Allocate`` refuses more than
  one replica per entry of ``ContainerRequests`` (one per container) with ``failRequestsGreaterThanOne``, and
  ``internal/rm/allocate.go`` ``distributedAlloc`` gives each replica the GPU with the fewest allocated;
- MIG: the GPU operator's ``mixed`` strategy advertises a MIG-mode GPU only as ``nvidia.com/mig-<profile>``
  slices, so ``nvidia.com/gpu`` allocatable counts the GPUs not in MIG mode (NVIDIA "GPU Operator with MIG",
  mixed strategy), while GPU feature discovery's ``nvidia.com/gpu.count`` counts every GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler.extender import wire
from scheduler.extender.resources import pod_request
from scheduler.extender.view import ExtenderView
from scheduler.extender.watch import apply_node_event, apply_pod_event
from scheduler.fgd.model import Workload
from scheduler.labels import GPU_RESOURCE, SHARED_GPU_RESOURCE
from scheduler.sim.policies.fgd_extender import node_object

MIG_1G = "nvidia.com/mig-1g.10gb"


def sliced(name: str, gpus: int, replicas: int, cpu: int = 32000) -> dict[str, Any]:
    """A time-sliced node as the device plugin advertises it with renameByDefault: only gpu.shared."""
    node = node_object(name, cpu, 131072, gpus, "A10", replicas)
    for key in ("allocatable", "capacity"):
        node["status"][key].pop(GPU_RESOURCE)
    return node


def mig(name: str, whole: int, cpu: int = 32000) -> dict[str, Any]:
    """An 8-GPU node under the mixed MIG strategy: 8 - ``whole`` GPUs in MIG mode (7 slices each)."""
    node = node_object(name, cpu, 131072, 8, "A100", 1)
    for key in ("allocatable", "capacity"):
        node["status"][key][GPU_RESOURCE] = str(whole)
        node["status"][key][MIG_1G] = str(7 * (8 - whole))
    return node


def gpu_requests(**requests: str) -> dict[str, str]:
    names = {"gpu": GPU_RESOURCE, "shared": SHARED_GPU_RESOURCE, "mig": MIG_1G}
    return {names.get(k, k): v for k, v in requests.items()}


def pod(uid: str, *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any) -> dict:
    body: dict[str, Any] = {"schedulerName": "gpu-binpack", "containers": list(containers), **spec}
    if init:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": uid, "namespace": "t", "uid": uid},
            "spec": body}  # fmt: skip


def ask(name: str, **requests: str) -> dict[str, Any]:
    """A container asking for ``requests`` (keys cpu, memory, gpu, shared, mig), requests = limits."""
    res = gpu_requests(**requests)
    return {"name": name, "image": "busybox", "resources": {"requests": res, "limits": dict(res)}}


def two_slices(uid: str) -> dict[str, Any]:
    """A pod of two containers, one gpu.shared replica each: its request is the sum, two replicas."""
    return pod(uid, ask("a", cpu="1", memory="1Gi", shared="1"), ask("b", cpu="1", memory="1Gi", shared="1"))


def view_of(*nodes: dict[str, Any], expected: Workload | None = None) -> ExtenderView:
    view = ExtenderView(expected=expected)
    for node in nodes:
        apply_node_event(view, "ADDED", node)
    return view


def free(view: ExtenderView, node: str) -> list[int]:
    built = view._build()
    n = built.index[node]
    return built.state.free_gpu[n, : int(built.cluster.num_gpu[n])].tolist()


def filtered(view: ExtenderView, p: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return view.filter(wire.parse_args({"Pod": p, "NodeNames": names}))


def priorities(view: ExtenderView, p: dict[str, Any], names: list[str]) -> dict[str, int]:
    return {h["Host"]: h["Score"] for h in view.prioritize(wire.parse_args({"Pod": p, "NodeNames": names}))}


def running(p: dict[str, Any], node: str) -> dict[str, Any]:
    return {**p, "spec": {**p["spec"], "nodeName": node}, "status": {"phase": "Running"}}


def scheduler_binds(view: ExtenderView, p: dict[str, Any], node: str) -> None:
    """kube-scheduler binds the pod the filter left one node for; the watch delivers it, counted once."""
    uid = p["metadata"]["uid"]
    assert view.placement(uid) is not None and uid in view.assumed  # counted since the filter
    apply_pod_event(view, "MODIFIED", running(p, node))
    assert uid not in view.assumed


# ---- (a) time-sliced replicas: one per container, summed over the pod ------------------------------------


def test_two_containers_of_one_replica_each_are_bound_and_take_two_replicas() -> None:
    """The device plugin allocates per container, so 2 x gpu.shared:1 is allowed; the kubelet counts the sum
    (2) against the node's gpu.shared allocatable. With one GPU of 4 replicas both replicas share it."""
    view = view_of(sliced("one-gpu", 1, 4), sliced("full", 1, 4))
    for i in range(3):
        apply_pod_event(view, "ADDED", running(pod(f"r{i}", ask("m", cpu="1", shared="1")), "full"))
    result = filtered(view, two_slices("p"), ["one-gpu", "full"])
    assert result["NodeNames"] == ["one-gpu"]
    assert set(result["FailedNodes"]) == {"full"}  # one replica left there, the pod needs two
    scheduler_binds(view, two_slices("p"), "one-gpu")
    assert view.placement("p") == ("one-gpu", [0, 0], 250)
    assert free(view, "one-gpu") == [500]
    apply_pod_event(view, "DELETED", running(two_slices("p"), "one-gpu"))
    assert free(view, "one-gpu") == [1000]
    view._build().state.check()


def test_the_replicas_of_one_pod_spread_over_gpus_as_the_device_plugin_gives_them() -> None:
    """distributedAlloc per container, in turn: the second replica goes to the GPU with fewer allocated."""
    view = view_of(sliced("n", 2, 2))
    apply_pod_event(view, "ADDED", running(two_slices("p"), "n"))
    node, gpus, milli = view.placement("p") or ("", [], 0)
    assert (node, sorted(gpus), milli) == ("n", [0, 1], 500)
    apply_pod_event(view, "ADDED", running(two_slices("q"), "n"))
    assert free(view, "n") == [0, 0]
    assert filtered(view, pod("r", ask("m", cpu="1", shared="1")), ["n"])["NodeNames"] == []
    view._build().state.check()


def test_a_container_asking_two_replicas_is_unresolvable_on_every_node() -> None:
    """failRequestsGreaterThanOne: the kubelet's Allocate fails for that container on any node, so the
    extender reports every node as failed and unresolvable (preemption cannot help)."""
    view = view_of(sliced("a", 2, 4), sliced("b", 4, 4))
    result = filtered(view, pod("p", ask("m", cpu="1", shared="2")), ["a", "b"])
    assert result["NodeNames"] == [] and result["FailedNodes"] == {}
    assert set(result["FailedAndUnresolvableNodes"]) == {"a", "b"}
    assert "one per container" in result["FailedAndUnresolvableNodes"]["a"]
    assert set(priorities(view, pod("p", ask("m", cpu="1", shared="2")), ["a", "b"]).values()) == {0}


def test_a_two_replica_pod_goes_where_fragmentation_grows_least() -> None:
    """Prioritize scores a two-replica pod by FGD's measure: the node whose fragmentation F_n(M) grows least
    once both replicas are placed (measured here by binding the pod on a copy of each node)."""
    expected = Workload.build([1000] * 4, [1024] * 4, [1, 1, 1, 1], [1000, 1000, 500, 500])
    states = {"empty": [], "halves": ["h1", "h2"], "one-half": ["o1"]}

    def cluster() -> ExtenderView:
        view = view_of(*(sliced(n, 2, 2) for n in states), expected=expected)
        for node, pods in states.items():
            for uid in pods:
                apply_pod_event(view, "ADDED", running(pod(uid, ask("m", cpu="1", shared="1")), node))
        return view

    growth = {}
    for node in states:
        view = cluster()
        built = view._build()
        before = float(built.frag.node[built.index[node]])
        apply_pod_event(view, "ADDED", running(two_slices("p"), node))
        growth[node] = float(built.frag.node[built.index[node]]) - before
    scores = priorities(cluster(), two_slices("p"), list(states))
    assert len(set(growth.values())) == len(states)  # the three nodes are told apart
    assert sorted(states, key=growth.__getitem__) == sorted(states, key=lambda n: -scores[n])
    assert scores["halves"] == wire.MAX_PRIORITY  # both replicas fill the half-used GPUs: no fragment left


# ---- (b) sidecars, init containers, pod-level requests and overhead (PodRequests) -----------------------


def test_a_native_sidecar_adds_to_the_pod_and_the_node_must_hold_the_sum() -> None:
    """A 6-CPU main container and a 4-CPU sidecar need 10 CPUs (the sum, not the larger 6); an
    8-CPU node fails the pod, a 12-CPU node takes it and keeps 2 free."""
    sidecar = {**ask("proxy", cpu="4"), "restartPolicy": "Always"}
    p = pod("p", ask("main", cpu="6", gpu="1"), init=[sidecar])
    view = view_of(
        node_object("small", 8000, 65536, 1, "A10", 1), node_object("big", 12000, 65536, 1, "A10", 1)
    )
    result = filtered(view, p, ["small", "big"])
    assert result["NodeNames"] == ["big"] and set(result["FailedNodes"]) == {"small"}
    scheduler_binds(view, p, "big")
    built = view._build()
    assert int(built.state.free_cpu[built.index["big"]]) == 2000


def test_an_init_container_runs_beside_only_the_sidecars_declared_before_it() -> None:
    """InitContainerUse(i) = sum of the restartable init containers before i + init container i; the pod
    needs max(app containers + all sidecars, max_i InitContainerUse(i))."""
    sidecar = {**ask("proxy", cpu="4"), "restartPolicy": "Always"}
    setup = ask("setup", cpu="5")
    main = ask("main", cpu="2")
    assert pod_request(pod("after", main, init=[sidecar, setup])).cpu_milli == 9000  # 4 + 5 > 2 + 4
    assert pod_request(pod("before", main, init=[setup, sidecar])).cpu_milli == 6000  # max(5, 4), 2 + 4
    assert pod_request(pod("plain", main, init=[setup])).cpu_milli == 5000  # an ordinary init: max


def test_sidecar_gpus_count_like_app_containers_and_init_gpus_are_maxed() -> None:
    """Extended resources follow the same aggregation: a sidecar's replica adds, an init container's does not."""
    sidecar = {**ask("helper", cpu="1", shared="1"), "restartPolicy": "Always"}
    view = view_of(sliced("n", 1, 4))
    p = pod("p", ask("main", cpu="1", shared="1"), init=[sidecar, ask("setup", cpu="1", shared="1")])
    assert filtered(view, p, ["n"])["NodeNames"] == ["n"]
    scheduler_binds(view, p, "n")
    assert free(view, "n") == [500]  # 2 replicas: main + sidecar; setup's ran before them and is maxed


def test_pod_level_requests_replace_the_containers_and_overhead_is_added() -> None:
    """PodLevelResources (beta, on by default from 1.34): spec.resources.requests replace the containers' sum
    for CPU and memory; spec.overhead (RuntimeClass) is added on top."""
    p = pod(
        "p",
        ask("a", cpu="1", memory="1Gi"),
        ask("b", cpu="1", memory="1Gi"),
        resources={"requests": {"cpu": "3"}},
        overhead={"cpu": "250m", "memory": "512Mi"},
    )
    req = pod_request(p)
    assert (req.cpu_milli, req.memory_mib) == (3250, 2560)


# ---- (c) MIG nodes: whole GPUs from the allocatable ------------------------------------------------------


def test_a_mig_node_has_the_whole_gpus_its_allocatable_has_not_its_gpu_count_label() -> None:
    view = view_of(mig("all-mig", 0), mig("mixed", 2))
    assert free(view, "all-mig") == []  # gpu.count says 8
    assert free(view, "mixed") == [1000, 1000]
    result = filtered(view, pod("p", ask("m", cpu="1", gpu="1")), ["all-mig", "mixed"])
    assert result["NodeNames"] == ["mixed"]


def test_mig_pods_are_scored_by_their_cpu_and_tie_on_nodes_without_whole_gpus() -> None:
    """A MIG pod is CPU-only to the extender: on MIG nodes (no whole GPUs, nothing to fragment) every node
    scores the same, whatever CPU it has left; on a whole-GPU node its CPU would strand GPUs the expected
    1-GPU, 30-CPU pods need, so that node scores lower."""
    expected = Workload.build([30000], [1024], [1], [1000])
    whole = node_object("whole", 32000, 131072, 8, "A100", 1)
    view = view_of(mig("tight", 0, cpu=32000), mig("roomy", 0, cpu=64000), whole, expected=expected)
    p = pod("p", ask("m", cpu="4", mig="1"))
    assert filtered(view, p, ["tight", "roomy", "whole"])["NodeNames"] == ["tight", "roomy", "whole"]
    scores = priorities(view, p, ["tight", "roomy", "whole"])
    assert scores["tight"] == scores["roomy"] == wire.MAX_PRIORITY
    assert scores["whole"] < wire.MAX_PRIORITY


def test_node_capacity_of_a_time_sliced_node_comes_from_gpu_shared() -> None:
    view = view_of(sliced("n", 3, 4))
    assert free(view, "n") == [1000, 1000, 1000]
    apply_pod_event(view, "ADDED", running(pod("p", ask("m", cpu="1", shared="1")), "n"))
    assert sorted(free(view, "n")) == [750, 1000, 1000]
    assert np.array_equal(view._build().replica_milli, [250])
