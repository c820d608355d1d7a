"""FGD-Extender-DRA: the placement the deployed extender (``--dra-shares``) makes on a pool of GPU shares
through DRA, in-process, as the replay twin runs it through kube-scheduler 1.36 (twin.replay).

Every GPU node publishes one ResourceSlice of the driver's shape (a device per GPU, ``shares`` per GPU of
capacity) and advertises no GPU resource; a GPU pod asks through a ResourceClaim of its own (a share: the
fewest shares that cover its milli; whole GPUs: every share of ``count`` devices), a CPU-only pod through
none. The scheduler calls the extender for every pod (it manages no resource by name): ``/filter`` and
``/prioritize`` go to the view's verbs, and the pod lands on the best of ``priority x 1000 + profile``, the
profile being the gpu-binpack profile as it scores on claims (NodeResourcesFit MostAllocated on CPU and
memory only: it counts no claim), ties to the first node in the run's rank. The allocator then gives the
claim its node's first devices with room (first fit), writes the allocation into the claim with the pod in
``reservedFor``, and the watch delivers the claim and the bound pod to the view.

Uses the ``first-fit`` share rule and a workload in whole shares (``benchmarks/dra_shares.py``'s
``in_shares``); ``expected=False`` lets the extender learn its target from the claims, as it does without a
configured trace.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler.dra import DRIVER, SHARES, resource_claim
from scheduler.extender.watch import apply_pod_event
from scheduler.fgd.model import MILLI
from scheduler.sim.errors import TraceError
from scheduler.sim.policies.base import Batch, Context, Policy, make_batch, register
from scheduler.sim.policies.fgd_extender import node_object, pod_object
from scheduler.sim.policies.most_allocated import MostAllocatedPolicy

NAMESPACE = "team-sim"
CLAIM = "gpu"
LEVEL = 1000  # one extender priority level in scheduler points: weight 100 x MaxNodeScore 100 / 10


def share_slice(node: str, gpus: int, shares: int) -> dict[str, Any]:
    """The driver's ResourceSlice of ``node`` with what the view reads of it: ``gpus`` devices of ``shares``."""
    devices = [
        {"name": f"gpu-{g}", "allowMultipleAllocations": True, "capacity": {SHARES: {"value": str(shares)}}}
        for g in range(gpus)
    ]
    return {
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1},
            "devices": devices,
        },
    }


def claim_ask(num_gpu: int, gpu_milli: int, shares: int) -> tuple[int, int] | None:
    """(shares per device, devices) of a pod's claim; None for a CPU-only pod (it claims nothing)."""
    if not num_gpu:
        return None
    if gpu_milli >= MILLI:
        return shares, num_gpu
    return max(1, -(-gpu_milli * shares // MILLI)), 1


def first_fit(free: list[int], shares: int, count: int) -> list[int] | None:
    """The devices kube-scheduler's allocator gives ``count`` devices of ``shares`` each: the first with room."""
    room = [g for g, f in enumerate(free) if f >= shares][:count]
    return room if len(room) == count else None


@register
class ExtenderClaimsPolicy(Policy):
    """``shares``: each GPU's shares (the driver's ``--consumable-shares``); ``expected``: the extender is given
    the run's workload as its trace (``--trace``), else it learns its target from the claims."""

    name = "FGD-Extender-DRA"
    uses_share_gpu = False

    def __init__(self, shares: int = 8, expected: bool = True) -> None:
        self.shares = shares
        self.expected = expected

    def bind(self, ctx: Context) -> None:
        from scheduler.extender.view import ExtenderView

        super().bind(ctx)
        if ctx.share_rule != "first-fit":
            raise TraceError("FGD-Extender-DRA replays claims: the allocator's rule is first-fit")
        c = ctx.cluster
        self.view = ExtenderView(expected=ctx.target if self.expected else None, dra_shares=True)
        self.view.load_nodes(
            node_object(str(n), int(cpu), int(mem), 0, str(m), 1)
            for n, cpu, mem, m in zip(c.names, c.cpu_milli, c.memory_mib, c.gpu_model, strict=True)
        )
        book = self.view.shares
        assert book is not None
        for n, g in zip(c.names, c.num_gpu, strict=True):
            if int(g):
                book.set_slice(share_slice(str(n), int(g), self.shares))
        self.free = {str(n): [self.shares] * int(g) for n, g in zip(c.names, c.num_gpu, strict=True)}
        self.profile = MostAllocatedPolicy(gpu=0, shared=0)
        self.profile.bind(ctx)
        self.names = [str(n) for n in c.names]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.pods = 0

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        return np.zeros(len(batch.nodes), dtype=np.int64), None  # kube-scheduler's filters: fit or not

    def choose_node(self, column: np.ndarray, s: int) -> int:
        from scheduler.extender import wire

        candidates = np.flatnonzero(column >= 0)
        if not len(candidates):
            return -1
        sh = self.ctx.shapes
        c, m, k, d = sh.requests[s]
        self.pods += 1
        uid = f"pod-{self.pods:07d}"
        pod = pod_object(uid, c, m, 0, 0, sh.spec[s])
        ask = claim_ask(k, d, self.shares)
        claim = None
        if ask is not None:
            claim = resource_claim(NAMESPACE, uid, *ask)
            pod["spec"]["resourceClaims"] = [{"name": CLAIM, "resourceClaimName": uid}]
            self.view.claim_event("ADDED", claim)
        names = [self.names[i] for i in candidates.tolist()]
        args = wire.parse_args({"Pod": pod, "Nodes": None, "NodeNames": names})
        passed = self.view.filter(args).get("NodeNames") or []
        if not passed:  # unschedulable: the replay deletes the pod and its claim
            if claim is not None:
                self.view.claim_event("DELETED", claim)
            return -1
        at = {n: i for i, n in enumerate(names)}
        rows = candidates[[at[n] for n in passed]]
        if len(passed) == 1:
            best = passed[0]
        else:
            asked = wire.parse_args({"Pod": pod, "Nodes": None, "NodeNames": passed})
            prio = {h["Host"]: int(h["Score"]) for h in self.view.prioritize(asked)}
            batch = make_batch(self.ctx, s, rows)
            profile, _ = self.profile.score(batch)
            total = np.array([prio[n] for n in passed], dtype=np.int64) * LEVEL + profile
            best = passed[int(np.argmax(total))]
        if claim is not None and ask is not None:
            devices = first_fit(self.free[best], *ask)
            assert devices is not None, "kube-scheduler's filter passed a node without room for the claim"
            for g in devices:
                self.free[best][g] -= ask[0]
            claim["status"] = {
                "allocation": {"devices": {"results": [
                    {"driver": DRIVER, "pool": best, "device": f"gpu-{g}", "request": "gpu",
                     "consumedCapacity": {SHARES: str(ask[0])}} for g in devices]}},
                "reservedFor": [{"resource": "pods", "name": uid, "uid": uid}],
            }  # fmt: skip
            self.view.claim_event("MODIFIED", claim)
        apply_pod_event(self.view, "MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": best}})
        return self.index[best]
