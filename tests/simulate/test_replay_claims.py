"""The replay twin's objects for a pool of DRA shares (no twin): its nodes offer no GPU resource, its slices
one device per GPU with the pool's shares, a pod asks through a claim of its own what the stack replay gave it."""

from __future__ import annotations

from scheduler.dra import DEVICE_CLASS, DRIVER, SHARES
from scheduler.fgd.model import Cluster, Workload
from scheduler.fgd.shares import requested_shares
from scheduler.labels import GPU_RESOURCE, SHARED_GPU_RESOURCE
from scheduler.sim.policies.fgd_extender import pod_object
from twin.replay import mixed_pods, pod_claim, replay_nodes, replay_slices

CLUSTER = Cluster.build(["a-0", "b-0"], [32000, 32000], [65536, 65536], [4, 2], ["shares", "sliced"])
UNITS = {"shares": 8, "sliced": 2}
CLAIMS = frozenset({"shares"})


def test_a_pool_of_claims_offers_its_gpus_only_as_slice_devices() -> None:
    nodes = {n["metadata"]["name"]: n["status"]["allocatable"] for n in replay_nodes(CLUSTER, UNITS, CLAIMS)}
    assert GPU_RESOURCE not in nodes["a-0"] and SHARED_GPU_RESOURCE not in nodes["a-0"]
    assert nodes["b-0"][SHARED_GPU_RESOURCE] == "4" and GPU_RESOURCE not in nodes["b-0"]
    slices = replay_slices(CLUSTER, UNITS, CLAIMS, {"shares": ("NVIDIA L40S", 49152)})
    assert [s["spec"]["nodeName"] for s in slices] == ["a-0"]
    devices = slices[0]["spec"]["devices"]
    assert slices[0]["spec"]["driver"] == DRIVER and [d["name"] for d in devices] == [
        f"gpu-{i}" for i in range(4)
    ]
    assert {d["capacity"][SHARES]["value"] for d in devices} == {"8"}


def test_a_pod_asks_its_gpus_through_its_own_claim() -> None:
    pod, claim = pod_claim(pod_object("pod-1", 1000, 1024, 1, 375, "shares"), 3, 1)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert GPU_RESOURCE not in limits and SHARED_GPU_RESOURCE not in limits
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "pod-1"}]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert claim["metadata"]["name"] == "pod-1" and requested_shares(claim) == 3
    whole = pod_claim(pod_object("pod-2", 1000, 1024, 2, 1000, "shares"), 8, 2)[1]
    request = whole["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == DEVICE_CLASS and request["count"] == 2
    assert request["capacity"]["requests"][SHARES] == "8" and requested_shares(whole) is None


def test_a_pod_that_may_go_to_claims_or_to_gpu_resources_is_counted() -> None:
    pods = Workload.build([1000] * 4, [1024] * 4, [1, 1, 1, 0], [1000, 500, 1000, 0],
                          ["shares|sliced", "shares", "", "shares|sliced"])  # fmt: skip
    assert mixed_pods(pods, CLAIMS, {"shares", "sliced"}) == 2  # the first, and the third (it names no pool)
