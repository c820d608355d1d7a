"""The extender's view of GPU shares allocated through DRA (`sharing: dra-shares`, the extender's ``--dra-shares``).

A pod asks for a share by a ResourceClaim of the rendered DeviceClass (scheduler.dra), made from a team's
template; kube-scheduler's DynamicResources plugin allocates it from the nodes' ResourceSlices and writes the
allocation into the claim before the pod's Binding. The book keeps the ResourceSlices and ResourceClaims the
watch lists (resource.k8s.io/v1, served by the API server from Kubernetes 1.34; the extender's ServiceAccount
reads them through its ``system:kube-scheduler`` role, which grants list and watch on both while DRA is on:
kubernetes v1.36.4 plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go) and answers, for a pod that
claims shares, each node's FGD score over its devices' free shares (:func:`scheduler.fgd.shares.share_scores`,
the simulator's first-fit scoring).

Between the verb that chose a node and the allocation showing in the claim, the pod's shares are *assumed* on
the device the allocator will take (the node's first with room), as the view assumes whole GPUs; the claim's
allocation reserved for the pod (``status.reservedFor``) confirms it, and an unconfirmed assumption lapses with
the view's. A claim for several devices is assumed on the first that many with room, as the allocator takes
them. The target (FGD's expected workload) is the extender's configured trace (``--trace``) when it has one,
the same target the simulator's FGD uses; else it is learned: the asks (shares, devices) of the class's
claims still waiting for an allocation and of the last ``window`` allocated, each with the CPU of the pod that
uses it (once a verb saw that pod), as the trace's shapes carry their pods' CPU.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.dra import DEVICE_CLASS
from scheduler.fgd.shapes import TargetWorkload
from scheduler.fgd.shares import (
    Ask,
    Consumption,
    NodeShares,
    SliceDevices,
    claim_consumption,
    combine,
    requested,
    share_cluster,
    share_scores,
    share_target,
    slice_devices,
)


@dataclass(frozen=True)
class Assumed:
    node: str
    devices: tuple[str, ...]
    shares: int
    since: float


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def is_allocated(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def reserved_for(claim: Mapping[str, Any]) -> set[str]:
    """The UIDs of the pods a claim is reserved for (kube-scheduler adds the pod before binding it)."""
    return {str(r.get("uid", "")) for r in (claim.get("status") or {}).get("reservedFor") or []}


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a pod uses, by name in its namespace: a named claim as such, one from a template as
    the resourceclaim controller recorded it (``status.resourceClaimStatuses``)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    made = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    names = []
    for claim in spec.get("resourceClaims") or []:
        name = claim.get("resourceClaimName") or made.get(claim.get("name"))
        if name:
            names.append(str(name))
    return names


def asks_for_claims(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


class ShareBook:
    """ResourceSlices, ResourceClaims, assumed shares and recently allocated ones; not thread-safe on its own
    (the :class:`~scheduler.extender.view.ExtenderView` holds its lock around every call)."""

    def __init__(
        self, window: int = 1000, device_class: str = DEVICE_CLASS, expected: TargetWorkload | None = None
    ):
        self.device_class = device_class
        self.expected = expected  # a configured target (the extender's --trace): then nothing is learned
        self.slices: dict[str, SliceDevices] = {}  # parsed once, when the watch delivers them
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.consumption: dict[tuple[str, str], Consumption] = {}
        self.asked: dict[tuple[str, str], Ask | None] = {}  # each claim's ask of the class
        self.assumed: dict[str, Assumed] = {}
        self.recent: deque[tuple[Ask, int]] = deque(maxlen=window)  # with the CPU of the claim's pod
        self.cpu: dict[tuple[str, str], int] = {}  # each claim's pod's CPU (milli), once a verb saw the pod
        self._counted: set[tuple[str, str]] = set()  # allocated claims already in `recent`
        self._base: dict[str, NodeShares] | None = None  # slices less the allocated claims
        self._free: dict[str, NodeShares] | None = None  # and less the assumed shares
        self.pending: set[tuple[str, str]] = set()  # claims of the class without an allocation

    # ---- from the watch ---------------------------------------------------------------------------------

    def set_slice(self, obj: dict[str, Any]) -> None:
        parsed = slice_devices(obj)
        if parsed is None:
            self.delete_slice(obj)
            return
        self.slices[_key(obj)[1]] = parsed
        self._changed()

    def delete_slice(self, obj: Mapping[str, Any]) -> None:
        if self.slices.pop(_key(obj)[1], None) is not None:
            self._changed()

    def retain_slices(self, names: set[str]) -> None:
        for name in [n for n in self.slices if n not in names]:
            del self.slices[name]
        self._changed()

    def set_claim(self, claim: dict[str, Any]) -> None:
        key = _key(claim)
        self.claims[key] = claim
        self.consumption[key] = claim_consumption(claim)
        ask = self.asked[key] = requested(claim, self.device_class)
        self._changed()
        if not is_allocated(claim):
            self.pending.add(key)
        else:
            self.pending.discard(key)
            for uid in reserved_for(claim):  # the allocation now counts what was assumed
                self.assumed.pop(uid, None)
            if ask is not None and key not in self._counted:
                self._counted.add(key)
                self.recent.append((ask, self.cpu.get(key, 0)))

    def delete_claim(self, claim: Mapping[str, Any]) -> None:
        key = _key(claim)
        if self.claims.pop(key, None) is not None:
            self._changed()
        self.pending.discard(key)
        self.consumption.pop(key, None)
        self.asked.pop(key, None)
        self.cpu.pop(key, None)
        self._counted.discard(key)

    def retain_claims(self, keys: set[tuple[str, str]]) -> None:
        for key in [k for k in self.claims if k not in keys]:
            del self.claims[key]
            self.pending.discard(key)
            self.consumption.pop(key, None)
            self.asked.pop(key, None)
            self.cpu.pop(key, None)
            self._counted.discard(key)
        self._changed()

    def _changed(self) -> None:
        """A slice or claim changed: the free shares are recomputed when next asked."""
        self._base = self._free = None

    # ---- pods -------------------------------------------------------------------------------------------

    def knows_claims(self, pod: Mapping[str, Any]) -> bool:
        """Every claim of the pod is in the book (of the class or not)."""
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        names = pod_claim_names(pod)
        return len(names) == len((pod.get("spec") or {}).get("resourceClaims") or []) and all(
            (namespace, n) in self.claims for n in names
        )

    def pod_ask(self, pod: Mapping[str, Any]) -> Ask | None:
        """What a pod claims of the class: its claims' devices (of one share size; None when they differ), or
        None when it claims none of them or its claims are not in the book yet."""
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        total: Ask | None = None
        for name in pod_claim_names(pod):
            ask = self.asked.get((namespace, name))
            if ask is None:
                continue
            if total is not None and total[0] != ask[0]:
                return None
            total = (ask[0], ask[1] + (total[1] if total else 0))
        return total

    def note_cpu(self, pod: Mapping[str, Any], cpu_milli: int) -> None:
        """The CPU of the pod that uses its claims: the learned target's shapes carry it, as the trace's do."""
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        for name in pod_claim_names(pod):
            if (namespace, name) in self.claims:
                self.cpu[(namespace, name)] = cpu_milli

    def assume(self, uid: str, node: str, ask: Ask, now: float) -> None:
        """Count the pod's ``ask`` on ``node``'s first devices with room for it (the allocator's first fit) as
        the pod's, until its claim shows the allocation."""
        row = self.free().get(node)
        if not uid or row is None:
            return
        shares, count = ask
        room = [d for d, f in zip(row.devices, row.free, strict=True) if f >= shares][:count]
        if room and len(room) == count:
            self.assumed[uid] = Assumed(node, tuple(room), shares, now)
            self._free = None

    def forget(self, uid: str) -> None:
        if self.assumed.pop(uid, None) is not None:
            self._free = None

    def expire(self, now: float, ttl: float) -> None:
        for uid in [u for u, a in self.assumed.items() if now - a.since >= ttl]:
            self.forget(uid)

    # ---- the model --------------------------------------------------------------------------------------

    def free(self) -> dict[str, NodeShares]:
        """Each node's devices' free shares: the allocated claims' and the assumed shares taken."""
        if self._base is None:
            self._base = combine(self.slices.values(), self.consumption.values())
        if self._free is None:
            rows = dict(self._base)
            for a in self.assumed.values():
                row = rows.get(a.node)
                if row is not None and all(d in row.devices for d in a.devices):
                    free = list(row.free)
                    for d in a.devices:
                        g = row.devices.index(d)
                        free[g] = max(free[g] - a.shares, 0)
                    rows[a.node] = NodeShares(row.node, row.pool, row.devices, row.capacity, tuple(free))
            self._free = rows
        return self._free

    def target(self, asking: Ask | None = None) -> TargetWorkload:
        """The configured target; else the pending claims' asks and the recently allocated ones with their
        pods' CPU, the pod asking when nothing is known."""
        if self.expected is not None:
            return self.expected
        known = list(self.recent)
        known += [(a, self.cpu.get(key, 0)) for key in self.pending if (a := self.asked.get(key)) is not None]
        if not known and asking is not None:
            known = [(asking, 0)]
        per_gpu = max((r.per_gpu for r in self.free().values()), default=1)
        return share_target([a for a, _ in known], per_gpu, [c for _, c in known])

    def scores(
        self,
        names: list[str],
        ask: Ask | None,
        cpu_milli: int,
        memory_mib: int,
        free_cpu: Mapping[str, int],
        free_mem: Mapping[str, int],
    ) -> tuple[np.ndarray, list[str]]:
        """FGD scores (-1: no share devices, or no room) of a pod claiming ``ask`` (None: nothing, a CPU-only
        pod) on ``names`` (in order), given the nodes' free CPU and memory; and the (first) device the allocator
        would give it on each ('' if none)."""
        free = self.free()
        rows = {n: free[n] for n in names if n in free}
        out = np.full(len(names), -1, dtype=np.int64)
        devices = [""] * len(names)
        if not rows:
            return out, devices
        sc = share_cluster(rows, free_cpu, free_mem)
        shares, count = ask if ask is not None else (0, 0)
        score, pick = share_scores(sc, self.target(ask), shares, cpu_milli, memory_mib, count)
        at = {n: i for i, n in enumerate(sc.cluster.names)}
        for j, name in enumerate(names):
            i = at.get(name)
            if i is not None and score[i] >= 0:
                out[j] = score[i]
                devices[j] = rows[name].devices[int(pick[i])] if pick[i] >= 0 else ""
        return out, devices
