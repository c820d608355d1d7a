"""The extender learns its expected workload from the GPU pods of its own pools only.

Nodes and pods are written as the API server returns them (``kubectl get -o json``): the pool label the stack
puts on its nodes, allocatable from the device plugin, a Job's pod with the node selector Kueue's flavor
injected, a DaemonSet's pod with its controller reference, a plain CPU pod on an untainted node.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from scheduler.extender import wire
from scheduler.extender.view import ExtenderView
from scheduler.extender.watch import apply_pod_event, replace_nodes, replace_pods
from scheduler.labels import POOL_LABEL


def node(name: str, pool: str | None, gpus: int, replicas: int = 1, cpu: str = "96") -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    alloc = {"cpu": cpu, "memory": "1000Gi", "pods": "110", "ephemeral-storage": "900Gi"}
    if pool:
        labels[POOL_LABEL] = pool
        labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
        labels["nvidia.com/gpu.count"] = str(gpus)
        if replicas > 1:
            labels["nvidia.com/gpu.replicas"] = str(replicas)
            alloc["nvidia.com/gpu.shared"] = str(gpus * replicas)
        else:
            alloc["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "812", "labels": labels},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]} if pool else {},
        "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def pod(
    uid: str,
    cpu: str,
    gpus: int = 0,
    shared: int = 0,
    node_name: str | None = None,
    pool: str | None = None,
    owner: str = "Job",
    phase: str | None = None,
) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if shared:
        limits["nvidia.com/gpu.shared"] = str(shared)
    requests = {"cpu": cpu, "memory": "8Gi", **limits}
    spec: dict[str, Any] = {
        "schedulerName": "gpu-binpack",
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "registry.example/train:1", "resources": {"requests": requests,
                                                                                           "limits": limits}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
    }  # fmt: skip
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    if node_name:
        spec["nodeName"] = node_name
    kind_owner = {"apiVersion": "batch/v1" if owner == "Job" else "apps/v1", "kind": owner, "name": f"o-{uid}",
                  "uid": f"owner-{uid}", "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    status = {"phase": phase or ("Running" if node_name else "Pending"), "qosClass": "Burstable"}
    if not node_name:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": uid, "namespace": "team-a", "uid": uid, "ownerReferences": [kind_owner]},
        "spec": spec,
        "status": status,
    }


def learned(view: ExtenderView) -> Counter[tuple[int, int, int]]:
    """The target's shapes as (milli-CPU, milli per GPU, GPUs) with their pod counts."""
    t = view.target()
    rows = zip(t.cpu.tolist(), t.gpu_milli.tolist(), t.num_gpu.tolist(), t.count.tolist(), strict=True)
    return Counter({(c, m, k): n for c, m, k, n in rows})


def cluster(view: ExtenderView) -> None:
    replace_nodes(view, [node("h100-0", "h100", 8), node("h100-1", "h100", 8), node("a100-0", "a100", 8),
                         node("l40s-0", "l40s", 4, replicas=2), node("cpu-0", None, 0, cpu="32")])  # fmt: skip


def test_cpu_only_and_daemonset_pods_never_teach_the_target() -> None:
    view = ExtenderView()  # no pools named: every node with whole or time-sliced GPUs
    cluster(view)
    replace_pods(view, [
        pod("gpu-job", "7", gpus=2, node_name="h100-0"),
        pod("cpu-job", "3", node_name="cpu-0"),
        pod("cpu-on-gpu-node", "5", node_name="h100-1"),
        pod("burn-in", "1", gpus=8, node_name="h100-1", owner="DaemonSet"),
        pod("dcgm", "2", node_name="h100-0", owner="DaemonSet"),
    ])  # fmt: skip
    assert learned(view) == Counter({(7000, 1000, 2): 1})
    built = view._build()
    # the pods it learns nothing from still hold their room on their nodes
    assert built.state.free_gpu[built.index["h100-1"]].tolist() == [0] * 8


def test_pods_on_other_pools_never_teach_the_target() -> None:
    view = ExtenderView(pools=["h100", "l40s"])
    cluster(view)
    for p in (pod("ours", "7", gpus=2, node_name="h100-0"), pod("share", "4", shared=1, node_name="l40s-0"),
              pod("theirs", "9", gpus=4, node_name="a100-0")):  # fmt: skip
        apply_pod_event(view, "ADDED", p)
    assert learned(view) == Counter({(7000, 1000, 2): 1, (4000, 500, 1): 1})


def test_pending_pods_for_its_pools_teach_the_target_until_they_bind() -> None:
    """Pending shapes (the ones the pools cannot place yet) count; a pending pod that binds counts once, among
    the recent pods; one that is deleted leaves."""
    view = ExtenderView(pools=["h100", "l40s"])
    cluster(view)
    replace_pods(view, [
        pod("big", "32", gpus=8, pool="h100"),
        pod("share", "4", shared=1, pool="l40s"),
        pod("elsewhere", "9", gpus=4, pool="a100"),
        pod("gated", "11", gpus=1),  # no pool named yet (Kueue injects the selector on admission)
        pod("cpu-wait", "3", pool="h100"),
    ])  # fmt: skip
    assert learned(view) == Counter({(32000, 1000, 8): 1, (4000, 500, 1): 1})
    apply_pod_event(view, "MODIFIED", pod("big", "32", gpus=8, node_name="h100-1", pool="h100"))
    assert learned(view) == Counter({(32000, 1000, 8): 1, (4000, 500, 1): 1})
    apply_pod_event(view, "DELETED", pod("share", "4", shared=1, pool="l40s"))
    assert learned(view) == Counter({(32000, 1000, 8): 1})
    replace_pods(view, [pod("big", "32", gpus=8, node_name="h100-1", pool="h100")])
    assert learned(view) == Counter({(32000, 1000, 8): 1})


def test_a_pod_the_scheduler_asks_about_on_its_pools_nodes_is_pending_for_them() -> None:
    view = ExtenderView(pools=["h100"])
    cluster(view)
    replace_pods(view, [])
    asked = pod("gated", "11", gpus=1)  # names no pool: the watch cannot tell whose it is
    apply_pod_event(view, "ADDED", asked)
    assert not view.pending
    view.filter(wire.parse_args({"Pod": asked, "NodeNames": ["h100-0", "h100-1", "a100-0"]}))
    assert set(view.pending) == {"gated"}
    other = pod("not-ours", "9", gpus=4)
    view.filter(wire.parse_args({"Pod": other, "NodeNames": ["a100-0"]}))  # only another pool's node
    assert set(view.pending) == {"gated"}
    daemon = pod("burn-in", "1", gpus=8, owner="DaemonSet")
    view.prioritize(wire.parse_args({"Pod": daemon, "NodeNames": ["h100-0", "h100-1"]}))
    assert set(view.pending) == {"gated"}
    assert learned(view) == Counter({(11000, 1000, 1): 1})
