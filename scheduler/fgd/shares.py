"""GPU shares allocated through DRA (`sharing: dra-shares`) as the FGD arithmetic sees them: each node's devices'
free shares from its ResourceSlices and the allocated ResourceClaims, and the target workload from the claims.

The inputs are resource.k8s.io/v1 objects as the API server returns them (plain dicts). A device of the NVIDIA
DRA driver started with ``--consumable-shares=<N>`` (kubernetes-sigs/dra-driver-nvidia-gpu at commit 95932046,
cmd/gpu-kubelet-plugin/consumable_shares.go, ``applyConsumableShares``; the twin publishes the same shape,
``twin.dra``) has ``allowMultipleAllocations: true`` and a ``shares`` capacity of N. kube-scheduler writes what
each claim took into ``status.allocation.devices.results[].consumedCapacity`` (k8s.io/api v0.36.4
resource/v1 ``DeviceRequestAllocationResult.ConsumedCapacity``), so a device's free shares are its capacity less
what the allocated claims' results consumed from it; a result without ``consumedCapacity`` took the device whole.

The simulator's unit is milli-GPU per GPU (0..1000): a share of N is ``1000 / N`` milli (8 shares: 125), so
the nodes' devices become a :class:`~scheduler.fgd.state.ClusterState` and a claim a pod of one GPU of
``shares * 1000 / N`` milli, and :func:`~scheduler.fgd.frag.fgd_scores` with the ``first-fit`` rule (the
allocator's choice of device, :func:`~scheduler.fgd.frag.first_fit_gpu`) scores it: the same call the
simulator's FGD policy makes on a pool of shares (``share_rule="first-fit"``, benchmarks/dra_shares.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.dra import DEVICE_CLASS, DRIVER, SHARES
from scheduler.fgd.frag import NodeFragmentation, fgd_scores
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.fgd.shapes import TargetWorkload, target_workload
from scheduler.fgd.state import ClusterState

DEFAULT_SHARES = 1  # the driver's requestPolicy default for `shares` (a claim that names none takes one)


@dataclass(frozen=True)
class NodeShares:
    """One node's shareable GPUs, in the order the allocator walks them (its pools' slices, each slice's
    devices as published), with their capacity and free shares."""

    node: str
    pool: str
    devices: tuple[str, ...]
    capacity: tuple[int, ...]
    free: tuple[int, ...]

    @property
    def per_gpu(self) -> int:
        """Shares per GPU (the driver's N): the largest device's."""
        return max(self.capacity, default=0)


def _int(value: Any) -> int:
    """A capacity quantity as the driver publishes shares (a plain integer string, else any Quantity)."""
    text = str(value)
    if text.isdigit():
        return int(text)
    from kubernetes.utils import parse_quantity  # the official client's Quantity parser

    return int(parse_quantity(text))


def _shares_capacity(device: Mapping[str, Any], driver: str) -> int | None:
    """The device's `shares` capacity; None for a device that publishes none (a MIG device, an exclusive GPU).
    The v1 API keys capacity by its short name (the driver's domain is implied)."""
    capacity = device.get("capacity") or {}
    entry = capacity.get(SHARES) or capacity.get(f"{driver}/{SHARES}")
    return None if entry is None else _int(entry.get("value", 0))


@dataclass(frozen=True)
class SliceDevices:
    """What one ResourceSlice says of shares: its node, pool and generation, and its devices that publish
    shares with their capacity, in the slice's order."""

    name: str
    node: str
    pool: str
    generation: int
    devices: tuple[tuple[str, int], ...]


def slice_devices(obj: Mapping[str, Any], driver: str = DRIVER) -> SliceDevices | None:
    """A slice's shareable devices; None for another driver's slice or one not bound to a node."""
    spec = obj.get("spec") or {}
    if spec.get("driver") != driver or not spec.get("nodeName"):
        return None
    pool = spec.get("pool") or {}
    devices = []
    for device in spec.get("devices") or []:
        cap = _shares_capacity(device, driver)
        if cap is not None:
            devices.append((str(device.get("name", "")), cap))
    name = str((obj.get("metadata") or {}).get("name", ""))
    return SliceDevices(name, str(spec["nodeName"]), str(pool.get("name", "")), int(pool.get("generation", 0)),
                        tuple(devices))  # fmt: skip


Consumption = tuple[tuple[str, str, int | None], ...]  # (pool, device, shares taken; None: the whole device)


def claim_consumption(claim: Mapping[str, Any], driver: str = DRIVER) -> Consumption:
    """What an allocated claim took from ``driver``'s devices (nothing while it is not allocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    out = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") == driver:
            took = (result.get("consumedCapacity") or {}).get(SHARES)
            out.append(
                (
                    str(result.get("pool", "")),
                    str(result.get("device", "")),
                    None if took is None else _int(took),
                )
            )
    return tuple(out)


def consumed(claims: Iterable[Consumption]) -> dict[tuple[str, str], int | None]:
    """(pool, device) -> shares the claims took from it; None where one took the device whole."""
    out: dict[tuple[str, str], int | None] = {}
    for consumption in claims:
        for pool, device, took in consumption:
            before = out.get((pool, device), 0)
            out[(pool, device)] = None if took is None or before is None else before + took
    return out


def combine(slices: Iterable[SliceDevices], claims: Iterable[Consumption]) -> dict[str, NodeShares]:
    """Per node, the shareable devices of its pools' newest slices (in name order; an older generation is
    being replaced, and the allocator ignores it) and what the claims left of them."""
    chosen = sorted(slices, key=lambda s: s.name)
    newest: dict[str, int] = {}
    for s in chosen:
        newest[s.pool] = max(newest.get(s.pool, 0), s.generation)
    taken = consumed(claims)
    rows: dict[str, tuple[str, list[str], list[int], list[int]]] = {}
    for s in chosen:
        if s.generation != newest[s.pool]:
            continue
        row = rows.setdefault(s.node, (s.pool, [], [], []))
        for name, cap in s.devices:
            took = taken.get((s.pool, name), 0)
            row[1].append(name)
            row[2].append(cap)
            row[3].append(0 if took is None else max(cap - took, 0))
    return {
        node: NodeShares(node, pool, tuple(names), tuple(cap), tuple(free))
        for node, (pool, names, cap, free) in sorted(rows.items())
    }


def free_shares(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]], driver: str = DRIVER
) -> dict[str, NodeShares]:
    """Per node, its devices of ``driver`` that publish shares and what the allocated ``claims`` left of them
    (:func:`combine` of :func:`slice_devices` and :func:`claim_consumption`)."""
    parsed = [d for s in slices if (d := slice_devices(s, driver)) is not None]
    return combine(parsed, [claim_consumption(c, driver) for c in claims])


Ask = tuple[int, int]  # (shares of each device, devices): a claim's request of the class


def requested(claim: Mapping[str, Any], device_class: str = DEVICE_CLASS) -> Ask | None:
    """What a claim (or a template's claim spec) asks of ``device_class``: ``count`` devices of it, each its
    ``capacity.requests.shares`` (the driver's default, one, when it names none); None when it asks for no
    device of the class, for all of them (``allocationMode: All``), or in requests of different shares."""
    spec = claim.get("spec") or {}
    spec = spec.get("spec", spec)  # a ResourceClaimTemplate nests the claim's spec once more
    shares, count = None, 0
    for request in (spec.get("devices") or {}).get("requests") or []:
        exactly = request.get("exactly") or {}
        if exactly.get("deviceClassName") != device_class:
            continue
        if exactly.get("allocationMode", "ExactCount") != "ExactCount":
            return None
        asked = ((exactly.get("capacity") or {}).get("requests") or {}).get(SHARES)
        each = DEFAULT_SHARES if asked is None else _int(asked)
        if shares is not None and each != shares:
            return None
        shares, count = each, count + int(exactly.get("count", 1))
    return None if shares is None else (shares, count)


def requested_shares(claim: Mapping[str, Any], device_class: str = DEVICE_CLASS) -> int | None:
    """The shares a claim asks for from one device of ``device_class`` (:func:`requested`); None when it asks
    for no device of the class, or for more than one (a claim for several GPUs is not a share)."""
    ask = requested(claim, device_class)
    return ask[0] if ask is not None and ask[1] == 1 else None


def share_milli(shares: int, per_gpu: int) -> int:
    """``shares`` of a GPU cut into ``per_gpu`` as the simulator's milli-GPU (a whole GPU at most)."""
    return min(shares * MILLI // max(per_gpu, 1), MILLI)


@dataclass(frozen=True, eq=False)
class ShareCluster:
    """The nodes of :func:`free_shares` as the simulator's cluster: one GPU per device (1000 milli), the
    shares already taken allocated, with each node's free CPU and memory as given."""

    cluster: Cluster
    state: ClusterState
    shares: dict[str, NodeShares]
    per_gpu: int


def share_cluster(
    shares: Mapping[str, NodeShares],
    cpu_milli: Mapping[str, int],
    memory_mib: Mapping[str, int],
    model: Mapping[str, str] | None = None,
) -> ShareCluster:
    """The share nodes as a :class:`ClusterState`: capacity CPU/memory are the node's free ones (what other
    pods left), GPUs the node's share devices with their taken shares allocated (``share_milli``)."""
    names = sorted(shares)
    per_gpu = max((s.per_gpu for s in shares.values()), default=1) or 1
    cluster = Cluster.build(
        names,
        [int(cpu_milli.get(n, 0)) for n in names],
        [int(memory_mib.get(n, 0)) for n in names],
        [len(shares[n].devices) for n in names],
        [(model or {}).get(n, "") for n in names],
    )
    state = ClusterState(cluster)
    used = np.zeros_like(state.free_gpu)
    for i, name in enumerate(cluster.names):
        row = shares[name]
        for g, (cap, free) in enumerate(zip(row.capacity, row.free, strict=True)):
            used[i, g] = MILLI - share_milli(free, cap) if cap else MILLI
    state.take_gpus(used)
    return ShareCluster(cluster, state, dict(shares), per_gpu)


def share_target(
    claimed: Sequence[int | Ask], per_gpu: int, cpu_milli: Sequence[int] | None = None
) -> TargetWorkload:
    """FGD's target workload from claims (the pool's pending and recently allocated claims): each a shape of
    its devices (one where only shares are given) of ``share_milli`` milli each, with its pod's CPU (0 when not
    given). With no claims the target is a whole GPU, the pool's largest request."""
    asks = [(c, 1) if isinstance(c, int) else c for c in claimed]
    milli = [share_milli(s, per_gpu) for s, _ in asks] or [MILLI]
    gpus = [k for _, k in asks] or [1]
    cpu = list(cpu_milli) if cpu_milli is not None else [0] * len(milli)
    if len(cpu) != len(milli):
        cpu = [0] * len(milli)
    return target_workload(Workload.build(cpu, [0] * len(milli), gpus, milli))


def share_scores(
    sc: ShareCluster,
    target: TargetWorkload,
    shares: int,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    devices: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """FGD scores (0..100; -1 where the claim or the pod's CPU and memory do not fit, or the ask is none
    this can score) of a pod claiming ``devices`` devices of ``shares`` each on every node of ``sc``, in
    ``sc.cluster.names`` order, and the (first) device the allocator would give it there (first fit).

    ``devices=0`` is a pod that claims nothing (CPU-only): scored by what its CPU does to the node's
    fragmentation, as the simulator's FGD scores it. Several devices are scored as whole GPUs (every share
    of each, as a multi-GPU pod asks); several devices of part of a GPU are no shape of the FGD model (-1).
    The one scoring call, :func:`fgd_scores` with the ``first-fit`` rule."""
    st = sc.state
    nodes = np.arange(sc.cluster.size)
    models = sorted(set(sc.cluster.gpu_model))
    node_model = np.array([models.index(m) for m in sc.cluster.gpu_model], dtype=np.int64)
    out = np.full(len(nodes), -1, dtype=np.int64)
    pick = np.full(len(nodes), -1, dtype=np.int64)
    d = share_milli(shares, sc.per_gpu) if devices else 0
    if devices > 1 and d < MILLI:
        return out, pick
    frag = NodeFragmentation(st, target, node_model, models)
    fit = st.free_gpu >= max(d, 1)
    ok = (st.free_cpu >= cpu_milli) & (st.free_mem >= memory_mib)
    if devices:
        ok &= fit.sum(axis=1) >= devices
    idx = np.flatnonzero(ok)
    if not len(idx):
        return out, pick
    if d >= MILLI or not devices:
        score, _ = fgd_scores(frag, idx, st.free_cpu[idx], None, None, cpu_milli, devices, d, "first-fit")
        out[idx] = score
        if devices:
            pick[idx] = fit[idx].argmax(axis=1)
        return out, pick
    score, gpu = fgd_scores(
        frag, idx, st.free_cpu[idx], st.free_gpu[idx], fit[idx], cpu_milli, 1, d, "first-fit"
    )
    assert gpu is not None
    out[idx], pick[idx] = score, gpu
    return out, pick
