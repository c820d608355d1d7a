"""The extender's view of the cluster and its three verbs: filter, prioritize, bind.

The view holds the nodes (capacity, GPU model, replicas per GPU) and the pods bound to them, as a simulator
:class:`~scheduler.fgd.state.ClusterState` with its :class:`~scheduler.fgd.frag.NodeFragmentation`, so a
prioritize call is one vectorised :func:`~scheduler.fgd.frag.fgd_scores` over the candidate nodes: the same
code the simulator's FGD policy runs.

Pods count at once: ``bind`` allocates the pod in the view before it answers (and gives it back if the
binding fails), so the next pod already sees those GPUs taken; the watch later confirms the same pod by UID.
Which GPU a time-sliced replica uses is the device plugin's choice, modelled by
:func:`~scheduler.fgd.frag.distributed_gpu`; a pod whose containers ask one replica each gets them one after
another (the kubelet allocates container by container), so two may share a GPU.

The expected workload (FGD's target) is either a configured trace or the shapes of the last ``window``
pods the view has seen bound (refreshed every ``window // 10`` pods); until any pod is known the pod being
placed is its own target.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.extender import wire
from scheduler.extender.layout import Built, feasible, fgd_group, give_back, replica_gpus, room, take
from scheduler.extender.resources import NodeCapacity, PodRequest, node_capacity, pod_request
from scheduler.fgd.frag import NodeFragmentation
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.fgd.shapes import TargetWorkload, target_workload
from scheduler.fgd.state import ClusterState

Binder = Callable[[wire.BindingArgs], None]  # posts the Binding; raises to fail it
PENDING_MAX = 10_000  # pods remembered between prioritize and bind
FRESH_BIND_S = 30.0  # a pod this view bound is kept through a relist that may predate the binding
LISTS = ("nodes", "pods")  # the view is ready once both initial lists are applied
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


def scale_scores(fgd: np.ndarray) -> np.ndarray:
    """FGD scores (0..100, -1 infeasible) to extender priorities 0..10: the best node(s) get 10, the others
    0..9 by their place between the worst and the best, infeasible nodes 0.

    The extender API has eleven levels; a plain ``score // 10`` would tie most nodes (FGD scores of a cluster
    sit within a few points), so the scale is relative to the candidates and the best node always stands out.
    """
    out = np.zeros(len(fgd), dtype=np.int64)
    ok = fgd >= 0
    if not ok.any():
        return out
    hi, lo = int(fgd[ok].max()), int(fgd[ok].min())
    if hi == lo:
        out[ok] = wire.MAX_PRIORITY
        return out
    out[ok] = ((fgd[ok] - lo) * (wire.MAX_PRIORITY - 1)) // (hi - lo)
    out[ok & (fgd == hi)] = wire.MAX_PRIORITY
    return out


class ExtenderView:
    """Nodes, bound pods and the expected workload; thread-safe (the server and the watch share it)."""

    def __init__(self, expected: Workload | None = None, window: int = 1000, binder: Binder | None = None):
        self._lock = threading.RLock()
        self.nodes: dict[str, NodeCapacity] = {}
        self.placed: dict[str, _Placed] = {}
        self.pending: OrderedDict[str, PodRequest] = OrderedDict()
        self.expected = expected
        self.window = window
        self.recent: deque[tuple[int, int, int, int, str]] = deque(maxlen=window)
        self._since_target = 0
        self.binder = binder
        self._built: Built | None = None
        self._listed: set[str] = set()
        self._bound_at: dict[str, float] = {}

    @property
    def ready(self) -> bool:
        """Both initial lists (nodes and pods) applied: before that, answers would come from a partial view."""
        return self._listed >= set(LISTS)

    def listed(self, kind: str) -> None:
        with self._lock:
            self._listed.add(kind)

    def retain_nodes(self, names: Iterable[str]) -> None:
        """After a (re)list: drop the nodes the list no longer has, as client-go's reflector Replace does."""
        keep = set(names)
        with self._lock:
            for name in [n for n in self.nodes if n not in keep]:
                self.delete_node(name)

    def retain_pods(self, uids: Iterable[str], now: float | None = None) -> None:
        """After a (re)list: drop the pods the list no longer has bound (deleted or finished while the watch was
        down), except those this view bound itself moments ago, which a list taken before it may not show."""
        keep = set(uids)
        clock = time.monotonic() if now is None else now
        with self._lock:
            fresh = {u for u, t in self._bound_at.items() if clock - t < FRESH_BIND_S}
            self._bound_at = {u: t for u, t in self._bound_at.items() if u in fresh}
            for uid in [u for u in self.placed if u not in keep and u not in fresh]:
                self.pod_gone(uid)

    # ---- nodes and pods (from the watch, or from full Node objects in ExtenderArgs) ---------------------

    def set_node(self, node: dict[str, Any] | NodeCapacity) -> None:
        cap = node if isinstance(node, NodeCapacity) else node_capacity(node)
        with self._lock:
            if self.nodes.get(cap.name) != cap:
                self.nodes[cap.name] = cap
                self._built = None

    def delete_node(self, name: str) -> None:
        with self._lock:
            if self.nodes.pop(name, None) is not None:
                self._built = None
                for uid in [u for u, p in self.placed.items() if p.node == name]:
                    del self.placed[uid]

    def pod_bound(self, uid: str, node: str, request: PodRequest) -> None:
        """A pod running on ``node`` (watch event or our own bind); a pod already counted is left as is.

        A pod on a node the view does not know yet (the pod watch ran ahead of the node watch) is kept and
        counted when the node arrives."""
        with self._lock:
            if uid in self.placed:
                return
            if node not in self.nodes:
                self.placed[uid] = _Placed(node, request, [], -1)  # GPUs assigned when the node is known
                return
            built = self._build()
            n = built.index[node]
            placed = _Placed(node, request, [], -1)
            self._assign(built, n, placed)
            self.placed[uid] = placed
            built.frag.update(n)
            self.recent.append(_shape(request, int(built.replica_milli[n])))
            self._since_target += 1
            if self.expected is None and self._since_target >= max(self.window // 10, 1):
                self._built = None  # new expected workload: rebuild lazily

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
        with self._lock:
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
        built = Built(cluster, index, state, None, replica_milli, model_of)  # type: ignore[arg-type]
        for placed in self.placed.values():  # replay the bound pods on the new layout
            if placed.node in index:
                self._assign(built, index[placed.node], placed)
        built.frag = NodeFragmentation(state, self.target(extra), node_model, models)
        self._since_target = 0
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

    def _remember(self, pod: dict[str, Any], req: PodRequest) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if uid:
            self.pending[uid] = req
            self.pending.move_to_end(uid)
            while len(self.pending) > PENDING_MAX:
                self.pending.popitem(last=False)

    def _learn_nodes(self, args: wire.ExtenderArgs) -> None:
        for node in args.nodes or []:
            self.set_node(node)

    def filter(self, args: wire.ExtenderArgs) -> dict[str, Any]:
        req = pod_request(args.pod)
        with self._lock:
            self._learn_nodes(args)
            self._remember(args.pod, req)
            built = self._build(req)
            passed: list[str] = []
            failed: dict[str, str] = {}
            if req.refused_by_device_plugin:  # no node, and no preemption, can help it
                return wire.filter_result(args, [], {}, dict.fromkeys(args.node_names, REFUSED))
            names = args.node_names
            pos = np.fromiter((built.index.get(n, -1) for n in names), dtype=np.int64, count=len(names))
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
            return wire.filter_result(args, passed, failed, {})

    def prioritize(self, args: wire.ExtenderArgs) -> wire.HostPriorityList:
        req = pod_request(args.pod)
        with self._lock:
            self._learn_nodes(args)
            self._remember(args.pod, req)
            built = self._build(req)
            names = args.node_names
            pos = np.fromiter(map(built.index.__getitem__, names), dtype=np.int64, count=len(names))
            scores = np.full(len(names), -1, dtype=np.int64)
            known = np.flatnonzero(pos >= 0)
            nodes = pos[known]
            if len(nodes):
                scores[known] = self._fgd(built, nodes, req)
            return wire.host_priority_list(names, scale_scores(scores).tolist())

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

    def bind(self, args: wire.BindingArgs) -> dict[str, Any]:
        """Count the pod on its node at once, then post the Binding (:attr:`binder`, outside the lock); a
        binder that raises gives the GPUs back and the scheduler gets its error."""
        with self._lock:
            req = self.pending.pop(args.pod_uid, None)
            if req is None:
                return wire.binding_result(
                    f"pod {args.pod_namespace}/{args.pod_name} was not seen in filter or prioritize"
                )
            if args.node not in self.nodes:
                return wire.binding_result(f"node {args.node} is not in the GPU extender's view")
            self.pod_bound(args.pod_uid, args.node, req)  # count it at once
            self._bound_at[args.pod_uid] = time.monotonic()
        if self.binder is not None:
            try:
                self.binder(args)
            except Exception as exc:  # the API refused: give the GPUs back, report to the scheduler
                self.pod_gone(args.pod_uid)
                return wire.binding_result(f"binding {args.pod_namespace}/{args.pod_name} failed: {exc}")
        return wire.binding_result()

    def placement(self, uid: str) -> tuple[str, list[int], int] | None:
        """Where the view put a pod: (node, GPU indices, milli per GPU); for tests and the simulator."""
        with self._lock:
            p = self.placed.get(uid)
            return (p.node, list(p.gpus), p.milli) if p else None

    def load_nodes(self, nodes: Iterable[dict[str, Any] | NodeCapacity]) -> None:
        for node in nodes:
            self.set_node(node)
