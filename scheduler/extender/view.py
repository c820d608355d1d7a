"""The extender's view of the cluster and its two verbs: filter and prioritize.

The view holds the nodes (capacity, GPU model, replicas per GPU) and the pods bound to them, as a simulator
:class:`~scheduler.fgd.state.ClusterState` with its :class:`~scheduler.fgd.frag.NodeFragmentation`, so a
prioritize call is one vectorised :func:`~scheduler.fgd.frag.fgd_scores` over the candidate nodes: the same
code the simulator's FGD policy runs.

kube-scheduler binds every pod itself (the profile has no ``bindVerb``), so its cache assumes the pod before the
Binding and no second Binding can race one of the extender's. The extender learns where a pod went from its
watch, which sees ``spec.nodeName`` only after the Binding: until then the pods in flight would look free. So the
view *assumes* a pod where the scheduler will put it, as soon as a verb tells it (kubernetes v1.35.8
``pkg/scheduler/schedule_one.go``): on the one node its filter passes (``schedulePod``: "When only one node
after predicate, just use it", no prioritize call; an opportunistic batch's hinted node arrives that way too,
``evaluateNominatedNode``), or on the one node it scores 10 in prioritize (:func:`scale_scores`: 1,000 points
ahead of any other node, more than the profile's own scores make up; were several nodes scored 10, the
scheduler would pick among them at random). The watch then confirms the pod by UID, or moves it to the node it really got; an
assumption the watch never confirms (the binding cycle failed and the pod was not retried through the
extender) lapses after :data:`ASSUMED_TTL_S`, and a retried pod's filter drops its earlier assumption first.
Which GPU a time-sliced replica uses is the device plugin's choice, modelled by
:func:`~scheduler.fgd.frag.distributed_gpu`; a pod whose containers ask one replica each gets them one after
another (the kubelet allocates container by container), so two may share a GPU.

The expected workload (FGD's target) is either a configured trace or learned from the GPU pods of the
extender's own pools (:mod:`scheduler.extender.target`): the ones pending for them now and the last
``window`` bound to their nodes, refreshed every ``window // 10`` changes; until any is known the pod being
placed is its own target.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.extender import wire
from scheduler.extender.layout import (
    Built,
    feasible,
    fgd_group,
    give_back,
    most_allocated,
    replica_gpus,
    room,
    take,
)
from scheduler.extender.resources import (
    NodeCapacity,
    PodRequest,
    asks_gpu_resource,
    node_capacity,
    pod_request,
)
from scheduler.extender.shares import ShareBook, asks_for_claims
from scheduler.extender.target import manages, pending_milli, pool_sizes, teaches
from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.fgd.shapes import TargetWorkload, target_workload
from scheduler.fgd.shares import Ask
from scheduler.fgd.state import ClusterState

ASSUMED_TTL_S = 60.0  # an assumption the watch has not confirmed by then is dropped (a bound pod is re-added)
LISTS = ("nodes", "pods")  # the view is ready once both initial lists are applied
SHARE_LISTS = ("resourceslices", "resourceclaims")  # and with --dra-shares these two
# How long prioritize waits for a pod's claim to reach the view: the scheduler's own informer has it (its DRA
# plugin does not pass a pod whose claim it has not seen), the view's watch a moment later; well within the
# scheduler's 2 s extender timeout.
CLAIM_WAIT_S = 0.5
REFUSED = (
    "a container asks for more than one nvidia.com/gpu.shared replica, which the device plugin refuses "
    "(failRequestsGreaterThanOne): ask for one per container"
)


@dataclass
class _Placed:
    node: str
    request: PodRequest
    gpus: list[int]  # one entry per whole GPU or replica: a GPU appears once per replica it gives the pod
    milli: int  # per entry; -1: not yet allocated
    cpu: int = 0  # what was allocated (a pod the API runs beyond the view's room is clipped to it)
    mem: int = 0


class _Index(dict[str, int]):
    """Node name -> position; an unknown name maps to -1 (for vectorised lookups with ``map``)."""

    def __missing__(self, key: str) -> int:
        return -1


def _shape(req: PodRequest, replica_milli: int) -> tuple[int, int, int, int, str]:
    """The pod as a target shape; n replicas become n GPUs of one replica each (the shape model has no
    "n replicas on any GPUs"; the device plugin spreads them over GPUs when it can)."""
    if req.replicas:
        return (req.cpu_milli, req.memory_mib, req.replicas, replica_milli, "|".join(req.models))
    return (req.cpu_milli, req.memory_mib, req.gpus, MILLI if req.gpus else 0, "|".join(req.models))


def scale_scores(fgd: np.ndarray, single: bool = True, first: int | None = None) -> np.ndarray:
    """FGD scores (0..100, -1 infeasible) to extender priorities 0..10: one best node gets 10 (``first``, default
    the first in order), the other nodes as good 9, the rest 0..8 by their place between the worst and the best, infeasible nodes 0.
    ``single=False`` (a pod whose GPUs the view does not model: MIG) gives every best node 10, so the profile's
    own scores choose among them.

    The extender API has eleven levels; a plain ``score // 10`` would tie most nodes (FGD scores of a cluster
    sit within a few points), so the scale is relative to the candidates and the best node always stands out.
    Only one node gets 10, the one the view assumes the pod on: with the weight (100) that level is worth 1,000
    points more than any other node's (``score * weight * MaxNodeScore / MaxExtenderPriority``, kubernetes
    v1.35.8 ``schedule_one.go`` ``prioritizeNodes``), more than the profile's own scores differ by, so the
    scheduler binds the pod where the view counts it instead of breaking the tie at random elsewhere.
    """
    out = np.zeros(len(fgd), dtype=np.int64)
    ok = fgd >= 0
    if not ok.any():
        return out
    hi, lo = int(fgd[ok].max()), int(fgd[ok].min())
    top = wire.MAX_PRIORITY - 1 if single else wire.MAX_PRIORITY
    if hi > lo:
        out[ok] = ((fgd[ok] - lo) * (wire.MAX_PRIORITY - 2)) // (hi - lo)
    out[ok & (fgd == hi)] = top
    out[int(np.argmax(np.where(ok, fgd, -2))) if first is None else first] = wire.MAX_PRIORITY
    return out


class ExtenderView:
    """Nodes, bound pods and the expected workload; thread-safe (the server and the watch share it).

    ``pools``: the pool labels of the nodes whose pods teach the view its target (None: every node with GPUs
    the view models). ``shadow``: prioritize scores every node 0, so the profile alone decides, and only
    counts what FGD would have chosen. ``dra_shares``: the view also keeps the ResourceSlices and ResourceClaims
    (:class:`~scheduler.extender.shares.ShareBook`) and scores a pod that claims GPU shares by FGD over the
    nodes' devices' free shares; the scheduler then calls the extender for every pod (a claim names no
    resource its ``managedResources`` could list), and a pod that asks for neither a GPU resource nor a claim
    gets every node passed, and is scored by what its CPU does to the fragmentation of the nodes' devices (the
    whole GPUs' on nodes without share devices), as the simulator's FGD scores a CPU-only pod."""

    def __init__(
        self,
        expected: Workload | None = None,
        window: int = 1000,
        pools: Iterable[str] | None = None,
        shadow: bool = False,
        dra_shares: bool = False,
    ):
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeCapacity] = {}
        self.placed: dict[str, _Placed] = {}
        # uid -> when: counted on the node the scheduler is binding it to, not yet seen bound by the watch
        self.assumed: dict[str, float] = {}
        # assumptions the watch found on another node (the scheduler broke a tie the other way)
        self.moved = 0
        self.expected = expected
        self.window = window
        self.pools = frozenset(pools) if pools is not None else None
        self.shadow = shadow
        # prioritize calls; those where FGD and the profile each had a best node; those where FGD's node was
        # none of the profile's best (what the extender changes)
        self.prioritized = self.compared = self.disagreed = 0
        self.recent: deque[tuple[int, int, int, int, str]] = deque(maxlen=window)
        # uid -> (request, the pools it may go to; None: any): GPU pods pending for the view's pools
        self.pending: dict[str, tuple[PodRequest, frozenset[str] | None]] = {}
        self._since_target = 0
        self._target_pods = 0  # the pods the current target was learned from
        self._built: Built | None = None
        self._listed: set[str] = set()
        fixed = target_workload(expected) if expected is not None else None
        self.shares = ShareBook(window, expected=fixed) if dra_shares else None
        self.claims_changed = threading.Condition(self.lock)

    @property
    def ready(self) -> bool:
        """Every initial list (nodes and pods; slices and claims with shares) applied: before that, answers
        would come from a partial view."""
        return self._listed >= set(LISTS) | (set(SHARE_LISTS) if self.shares is not None else set())

    def listed(self, kind: str) -> None:
        with self.lock:
            self._listed.add(kind)

    def retain_nodes(self, names: Iterable[str]) -> None:
        """After a (re)list: drop the nodes the list no longer has, as client-go's reflector Replace does."""
        keep = set(names)
        with self.lock:
            for name in [n for n in self.nodes if n not in keep]:
                self.delete_node(name)

    def retain_pods(self, uids: Iterable[str]) -> None:
        """After a (re)list: drop the pods the list no longer has bound (deleted or finished while the watch was
        down), except the assumed ones, which no list shows bound before their Binding (they lapse on their own)."""
        keep = set(uids)
        with self.lock:
            for uid in [u for u in self.placed if u not in keep and u not in self.assumed]:
                self.pod_gone(uid)
            for uid in [u for u in self.pending if u not in keep]:
                self._unpend(uid)

    # ---- nodes and pods (from the watch, or from full Node objects in ExtenderArgs) ---------------------

    def set_node(self, node: dict[str, Any] | NodeCapacity) -> None:
        cap = node if isinstance(node, NodeCapacity) else node_capacity(node)
        with self.lock:
            if self.nodes.get(cap.name) != cap:
                self.nodes[cap.name] = cap
                self._built = None

    def delete_node(self, name: str) -> None:
        with self.lock:
            if self.nodes.pop(name, None) is not None:
                self._built = None
                for uid in [u for u, p in self.placed.items() if p.node == name]:
                    del self.placed[uid]
                    self.assumed.pop(uid, None)

    def pod_bound(self, uid: str, node: str, request: PodRequest, learn: bool = True) -> None:
        """A pod bound to ``node`` (a watch event): a pod assumed there is confirmed, one assumed elsewhere moves;
        a pod already counted is left as is. ``learn``: it may teach the target (:func:`target.teaches`).

        A pod on a node the view does not know yet (the pod watch ran ahead of the node watch) is kept and
        counted when the node arrives."""
        with self.lock:
            if self.assumed.pop(uid, None) is not None and self.placed[uid].node != node:
                self.moved += 1
                self.pod_gone(uid)
            if uid in self.placed:
                self._unpend(uid)
                return
            self._count(uid, node, request, learn)

    def pod_pending(self, uid: str, request: PodRequest, asked: frozenset[str] | None) -> None:
        """A GPU pod without a node that may teach the target (a watch event, or a verb asked about it), for
        the pools ``asked`` (None: it names none). Counted while it waits, when it may go to the view's pools;
        with pools named, a pod naming none counts once a verb is asked about it with their nodes."""
        with self.lock:
            if not uid or uid in self.placed or (asked is None and self.pools is not None):
                return
            if self.pending.get(uid) != (request, asked):
                self.pending[uid] = (request, asked)
                self._changed()

    def _unpend(self, uid: str) -> None:
        """The pod waits no more (gone, or counted already): its shape leaves the target at the next rebuild."""
        self.pending.pop(uid, None)

    def _changed(self) -> None:
        """The learned target's pods changed: rebuild it lazily every ``window // 10`` changes, or sooner
        while it was learned from fewer pods than that (a young cluster's first pods each count, then every
        time as many again have come)."""
        self._since_target += 1
        if self.expected is None and self._since_target >= max(min(self.window // 10, self._target_pods), 1):
            self._built = None

    def assume(
        self, uid: str, node: str, request: PodRequest, now: float | None = None, learn: bool = True
    ) -> None:
        """Count a pod on the node the scheduler is about to bind it to, until the watch says where it went."""
        with self.lock:
            if uid in self.placed or node not in self.nodes:
                return
            self._count(uid, node, request, learn)
            self.assumed[uid] = time.monotonic() if now is None else now

    def forget(self, uid: str) -> None:
        """Drop an unconfirmed assumption (the pod is being scheduled again); a bound pod stays."""
        with self.lock:
            if self.shares is not None:
                self.shares.forget(uid)
            if self.assumed.pop(uid, None) is not None:
                self.pod_gone(uid)

    def expire(self, now: float | None = None) -> None:
        """Drop the assumptions older than :data:`ASSUMED_TTL_S` that the watch never confirmed."""
        clock = time.monotonic() if now is None else now
        with self.lock:
            if self.shares is not None:
                self.shares.expire(clock, ASSUMED_TTL_S)
            for uid in [u for u, t in self.assumed.items() if clock - t >= ASSUMED_TTL_S]:
                self.forget(uid)

    def _count(self, uid: str, node: str, request: PodRequest, learn: bool = True) -> None:
        """Allocate the pod on ``node`` in the view (the caller holds the lock); a GPU pod on a node of the
        view's pools joins the recent pods the target learns from, unless ``learn`` is off. A pod that was
        pending was in the target already: its move to the recent pods is no change that calls for a rebuild."""
        with self.lock:
            waited = self.pending.pop(uid, None) is not None
            if node not in self.nodes:
                self.placed[uid] = _Placed(node, request, [], -1)  # GPUs assigned when the node is known
                return
            built = self._build()
            n = built.index[node]
            placed = _Placed(node, request, [], -1)
            self._assign(built, n, placed)
            self.placed[uid] = placed
            built.frag.update(n)
            if learn and not request.cpu_only and bool(built.managed[n]):
                self.recent.append(_shape(request, int(built.replica_milli[n])))
                if not waited:
                    self._changed()

    def _assign(self, built: Built, n: int, placed: _Placed) -> None:
        """Allocate ``placed`` on node ``n``: its recorded GPUs if they still fit, else by the device plugin's
        rule; a pod the API runs where the view sees no room counts its CPU and memory only."""
        st, req = built.state, placed.request
        gpus, milli = placed.gpus, placed.milli
        ok = milli >= 0 and room(st.free_gpu[n, : int(built.cluster.num_gpu[n])], gpus, milli)
        if not ok:
            milli = self._milli(built, n, req)
            chosen = self._gpus(built, n, req, milli)
            gpus, milli = (chosen, milli) if chosen is not None else ([], 0)
        cpu, mem = min(req.cpu_milli, int(st.free_cpu[n])), min(req.memory_mib, int(st.free_mem[n]))
        take(st, n, cpu, mem, gpus, milli if gpus else 0)
        placed.gpus, placed.milli, placed.cpu, placed.mem = gpus, (milli if gpus else 0), cpu, mem

    def pod_gone(self, uid: str) -> None:
        with self.lock:
            if self.shares is not None:
                self.shares.forget(uid)
            self._unpend(uid)
            self.assumed.pop(uid, None)
            placed = self.placed.pop(uid, None)
            if placed is None or self._built is None or placed.node not in self._built.index:
                return
            b = self._built
            n = b.index[placed.node]
            if placed.milli >= 0:
                give_back(b.state, n, placed.cpu, placed.mem, placed.gpus, placed.milli)
                b.frag.update(n)

    # ---- the model --------------------------------------------------------------------------------------

    def target(self, extra: PodRequest | None = None) -> TargetWorkload:
        if self.expected is not None:
            return target_workload(self.expected)
        shapes = list(self.recent)
        sizes = pool_sizes(self.nodes.values(), self.pools)
        for request, asked in self.pending.values():
            milli = pending_milli(request, asked, sizes)
            if milli is not None:
                shapes.append(_shape(request, milli))
        if not shapes and extra is not None:
            shapes = [_shape(extra, MILLI)]
        if not shapes:
            shapes = [(0, 0, 1, MILLI, "")]
        cpu, mem, k, d, spec = zip(*shapes, strict=True)
        return target_workload(Workload.build(cpu, mem, k, d, spec))

    def _build(self, extra: PodRequest | None = None) -> Built:
        if self._built is not None:
            return self._built
        caps = list(self.nodes.values())
        if not caps:
            caps = []
        cluster = Cluster.build(
            [c.name for c in caps],
            [c.cpu_milli for c in caps],
            [c.memory_mib for c in caps],
            [c.gpus for c in caps],
            [c.model for c in caps],
        )
        index = _Index((name, i) for i, name in enumerate(cluster.names))
        state = ClusterState(cluster)
        models = sorted(set(cluster.gpu_model))
        model_of = {m: j for j, m in enumerate(models)}
        node_model = np.array([model_of[m] for m in cluster.gpu_model], dtype=np.int64)
        replica_milli = np.array([self.nodes[n].replica_milli() for n in cluster.names], dtype=np.int64)
        pool_names = sorted({c.pool for c in caps})
        code = {p: j for j, p in enumerate(pool_names)}
        managed = np.array([manages(self.nodes[n], self.pools) for n in cluster.names], dtype=bool)
        pool_code = np.array([code[self.nodes[n].pool] for n in cluster.names], dtype=np.int64)
        built = Built(cluster, index, state, None, replica_milli, model_of, managed, pool_code, pool_names)  # type: ignore[arg-type]
        for placed in self.placed.values():  # replay the bound pods on the new layout
            if placed.node in index:
                self._assign(built, index[placed.node], placed)
        built.frag = NodeFragmentation(state, self.target(extra), node_model, models)
        self._since_target = 0
        self._target_pods = len(self.recent) + len(self.pending)
        self._built = built
        # The view is tens of thousands of long-lived objects; a full collection that scans them costs tens of
        # milliseconds in the middle of a request. Frozen objects are left out of every collection (gc.freeze).
        gc.freeze()
        return built

    @staticmethod
    def _milli(built: Built, n: int, req: PodRequest) -> int:
        if req.replicas:
            return int(built.replica_milli[n])
        return MILLI if req.gpus else 0

    @staticmethod
    def _gpus(built: Built, n: int, req: PodRequest, milli: int) -> list[int] | None:
        if req.replicas:
            return replica_gpus(built.state.free_gpu[n], req.replicas, milli)
        if req.gpus:
            free = built.state.fully_free_gpus(n, req.gpus)
            return free if len(free) == req.gpus else None
        return []

    @staticmethod
    def _fitting(built: Built, nodes: np.ndarray, req: PodRequest) -> np.ndarray:
        """Which of ``nodes`` (view indices) have room for the pod: CPU, memory, GPU model, and whole free GPUs
        or replicas left on the node's GPUs. One array operation over all candidates: a per-node loop cost
        5 ms a filter call at 1,200 nodes, most of the extender's time."""
        st = built.state
        fit = (st.free_cpu[nodes] >= req.cpu_milli) & (st.free_mem[nodes] >= req.memory_mib)
        if req.models:
            fit &= np.isin(np.asarray(built.cluster.gpu_model, dtype=object)[nodes], list(req.models))
        if req.replicas:
            milli = built.replica_milli[nodes]
            fit &= (st.free_gpu[nodes] // milli[:, None]).sum(axis=1) >= req.replicas
        elif req.gpus:
            fit &= (st.free_gpu[nodes] >= MILLI).sum(axis=1) >= req.gpus
        return np.asarray(fit, dtype=bool)

    # ---- the verbs -------------------------------------------------------------------------------------

    def _begin(self, pod: dict[str, Any]) -> str:
        """A scheduling attempt of ``pod`` starts: lapsed assumptions go, and so does this pod's own earlier one
        (a retried pod must not find its GPUs taken by itself); returns its UID ('' when it has none)."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self.expire()
        if uid:
            self.forget(uid)
        return uid

    def _learn_nodes(self, args: wire.ExtenderArgs) -> None:
        for node in args.nodes or []:
            self.set_node(node)

    def _asked(self, uid: str, pod: dict[str, Any], req: PodRequest, built: Built, pos: np.ndarray) -> bool:
        """A verb is asked about ``pod`` on the nodes ``pos`` (view indices, -1 unknown): a GPU pod with nodes
        of the view's pools among its candidates is pending for those pools. Returns whether it may teach the
        target (so its assumption does too)."""
        learn = teaches(pod, req)
        if learn and uid and len(built.managed):
            known = pos[pos >= 0]
            ours = known[built.managed[known]]
            if len(ours):
                self.pod_pending(
                    uid, req, frozenset(built.pool_names[c] for c in np.unique(built.pool_code[ours]))
                )
        return learn

    def claim_event(self, kind: str, claim: dict[str, Any]) -> None:
        """A ResourceClaim added, changed or deleted (the watch); wakes a verb waiting for it."""
        if self.shares is None:
            return
        with self.lock:
            if kind == "DELETED":
                self.shares.delete_claim(claim)
            else:
                self.shares.set_claim(claim)
            self.claims_changed.notify_all()

    def _pod_ask(self, pod: dict[str, Any]) -> Ask | None:
        """What the pod claims of the class; a pod with claims the view has not seen yet waits up to
        :data:`CLAIM_WAIT_S` for them (the caller holds the lock, which the wait releases)."""
        book = self.shares
        if book is None or not asks_for_claims(pod):
            return None
        self.claims_changed.wait_for(lambda: book.knows_claims(pod), timeout=CLAIM_WAIT_S)
        return book.pod_ask(pod)

    def _unmodelled(self, pod: dict[str, Any]) -> bool:
        """With shares, the scheduler calls the extender for every pod: one that asks for no GPU resource and
        no claim is filtered nowhere, only scored (the profile's filters decide where it fits)."""
        return self.shares is not None and not asks_gpu_resource(pod) and not asks_for_claims(pod)

    def filter(self, args: wire.ExtenderArgs) -> dict[str, Any]:
        if self._unmodelled(args.pod):
            return wire.filter_result(args, list(args.node_names), {}, {})
        req = pod_request(args.pod)
        with self.lock:
            self._learn_nodes(args)
            uid = self._begin(args.pod)
            built = self._build(req)
            passed: list[str] = []
            failed: dict[str, str] = {}
            if req.refused_by_device_plugin:  # no node, and no preemption, can help it
                return wire.filter_result(args, [], {}, dict.fromkeys(args.node_names, REFUSED))
            names = args.node_names
            pos = np.fromiter((built.index.get(n, -1) for n in names), dtype=np.int64, count=len(names))
            learn = self._asked(uid, args.pod, req, built, pos)
            known = pos >= 0
            fits = np.zeros(len(names), dtype=bool)
            fits[known] = self._fitting(built, pos[known], req)
            for name, is_known, ok in zip(names, known.tolist(), fits.tolist(), strict=True):
                if ok:
                    passed.append(name)
                elif not is_known:
                    failed[name] = "node not (yet) in the GPU extender's view"
                else:
                    failed[name] = "no room for the pod's GPUs, CPU or memory in the GPU extender's view"
            if uid and len(passed) == 1:  # the scheduler binds it there without asking prioritize
                self.assume(uid, passed[0], req, learn=learn)
                if self.shares is not None and (ask := self.shares.pod_ask(args.pod)) is not None:
                    self.shares.note_cpu(args.pod, req.cpu_milli)
                    self.shares.assume(uid, passed[0], ask, time.monotonic())
            return wire.filter_result(args, passed, failed, {})

    def prioritize(self, args: wire.ExtenderArgs) -> wire.HostPriorityList:
        req = pod_request(args.pod)
        with self.lock:
            self._learn_nodes(args)
            uid = self._begin(args.pod)
            if self._unmodelled(args.pod):
                return self._prioritize_shares(args, uid, req, self._build(req), None)
            ask = self._pod_ask(args.pod)  # may wait (and release the lock) before the view is read
            built = self._build(req)
            if ask is not None:
                return self._prioritize_shares(args, uid, req, built, ask)
            names = args.node_names
            pos = np.fromiter(map(built.index.__getitem__, names), dtype=np.int64, count=len(names))
            learn = self._asked(uid, args.pod, req, built, pos)
            scores = np.full(len(names), -1, dtype=np.int64)
            known = np.flatnonzero(pos >= 0)
            nodes = pos[known]
            if len(nodes):
                scores[known] = self._fgd(built, nodes, req)
            single = bool(req.gpus or req.replicas)  # a MIG pod: the profile chooses among equal nodes
            first = self._first_best(names, scores) if len(scores) and scores.max() >= 0 else None
            self.prioritized += 1
            if single and first is not None:
                self._compare(built, pos, scores, first, req)
            if self.shadow:  # the profile decides; the watch counts the pod where it goes
                return wire.host_priority_list(names, [wire.MIN_PRIORITY] * len(names))
            if single and uid and first is not None:  # the one scored 10
                self.assume(uid, names[first], req, learn=learn)
            return wire.host_priority_list(names, scale_scores(scores, single, first).tolist())

    def _prioritize_shares(
        self, args: wire.ExtenderArgs, uid: str, req: PodRequest, built: Built, ask: Ask | None
    ) -> wire.HostPriorityList:
        """A pod claiming ``ask`` (None: nothing, a CPU-only pod): FGD over the candidates' devices' free shares
        (the nodes' free CPU and memory from the view), the best node assumed to take them on the devices the
        allocator will give."""
        assert self.shares is not None
        if ask is not None:
            self.shares.note_cpu(args.pod, req.cpu_milli)
        names = args.node_names
        st = built.state
        known = [n for n in names if n in built.index]
        free_cpu = {n: int(st.free_cpu[built.index[n]]) for n in known}
        free_mem = {n: int(st.free_mem[built.index[n]]) for n in known}
        scores, _ = self.shares.scores(names, ask, req.cpu_milli, req.memory_mib, free_cpu, free_mem)
        if ask is None:  # a node without share devices: what the pod's CPU does to its whole GPUs, if any
            free = self.shares.free()
            rest = np.array(
                [j for j, n in enumerate(names) if n in built.index and n not in free], dtype=np.int64
            )
            if len(rest):
                scores[rest] = self._fgd(built, np.array([built.index[names[j]] for j in rest]), req)
        self.prioritized += 1
        first = self._first_best(names, scores) if len(scores) and scores.max() >= 0 else None
        if self.shadow or first is None:
            return wire.host_priority_list(names, [wire.MIN_PRIORITY] * len(names))
        if uid:
            self.assume(uid, names[first], req, learn=False)  # its CPU and memory
            if ask is not None:
                self.shares.assume(uid, names[first], ask, time.monotonic())
        return wire.host_priority_list(names, scale_scores(scores, True, first).tolist())

    def _compare(
        self, built: Built, pos: np.ndarray, scores: np.ndarray, first: int, req: PodRequest
    ) -> None:
        """Count whether FGD's node (``first``) is one the profile alone ranks best among the same feasible
        candidates (kube-scheduler picks at random among its best, so any of them is the profile's choice)."""
        ok = np.flatnonzero(scores >= 0)
        profile = most_allocated(built, pos[ok], req)
        self.compared += 1
        if profile[int(np.flatnonzero(ok == first)[0])] < profile.max():
            self.disagreed += 1

    def fragmentation(self) -> dict[str, tuple[float, int, int]]:
        """Per pool of the view's: FGD's fragment measure F (GPU milli the expected workload cannot use, the
        simulator's measure), unallocated and total GPU milli of its nodes."""
        with self.lock:
            built = self._build()
            out: dict[str, tuple[float, int, int]] = {}
            nodes = np.flatnonzero(built.managed)
            st = built.state
            for n, code in zip(nodes.tolist(), built.pool_code[nodes].tolist(), strict=True):
                frag, free, cap = out.get(built.pool_names[code], (0.0, 0, 0))
                out[built.pool_names[code]] = (frag + float(built.frag.node[n]), free + int(st.free_gpu_sum[n]),
                                               cap + int(st.gpu_cap[n].sum()))  # fmt: skip
            return out

    @staticmethod
    def _first_best(names: list[str], scores: np.ndarray) -> int:
        """The best-scored node the pod is assumed on: among FGD's equals the first by name, as the simulator's
        FGD takes the first of its name-sorted nodes. Not the first in the request's order: kube-scheduler lists
        nodes in its informer's (map) order, so that choice would differ between runs and from the simulator's."""
        tied = np.flatnonzero(scores == scores.max()).tolist()
        return int(min(tied, key=names.__getitem__))

    @staticmethod
    def _fgd(built: Built, nodes: np.ndarray, req: PodRequest) -> np.ndarray:
        """FGD scores (-1 where the pod does not fit) of ``req`` on ``nodes``, grouped by replica size.

        A CPU-only pod (a MIG pod among them: its slices are not modelled) is scored by what its CPU does to
        the whole and time-sliced GPUs' fragmentation; on nodes without such GPUs (MIG nodes) that is
        nothing, so they tie and the profile's own scores choose among them."""
        out = np.full(len(nodes), -1, dtype=np.int64)
        if req.refused_by_device_plugin:
            return out
        milli = built.replica_milli[nodes] if req.replicas else np.full(len(nodes), MILLI if req.gpus else 0)
        for d in np.unique(milli).tolist():
            rows = np.flatnonzero(milli == d)
            idx = nodes[rows]
            keep = np.flatnonzero(feasible(built, idx, req, d))
            if len(keep):
                out[rows[keep]] = fgd_group(built, idx[keep], req, d)
        return out

    def placement(self, uid: str) -> tuple[str, list[int], int] | None:
        """Where the view put a pod: (node, GPU indices, milli per GPU); for tests and the simulator."""
        with self.lock:
            p = self.placed.get(uid)
            return (p.node, list(p.gpus), p.milli) if p else None

    def load_nodes(self, nodes: Iterable[dict[str, Any] | NodeCapacity]) -> None:
        for node in nodes:
            self.set_node(node)
