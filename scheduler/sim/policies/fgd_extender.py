"""FGD-Extender: the placement the deployed scheduler extender makes, through its real HTTP protocol.

Each pod becomes an upstream-shaped ``ExtenderArgs`` (a ``v1.Pod`` with the pod's requests, the candidate nodes
by name as a ``nodeCacheCapable`` scheduler sends them) and goes to the extender's WSGI application in-process:
``/filter``, then ``/prioritize``; the pod lands on the first candidate with the highest returned priority
(candidates in the run's node rank order, as FGD breaks ties), where the extender has already counted it, and
the pod, bound, goes to the extender as its watch delivers it. The extender keeps its own view of the cluster;
the replay's state must agree with it.

Candidates are the nodes kube-scheduler's own filters pass (resources fit). If the extender answers with an
error, the pod is placed as the secondary scheduler's profile would place it without the extender
(``ignorable: true``: MostAllocated), which is the deployed fallback.

The extender speaks the API's granularity, so this policy needs the ``--as-deployed`` mapping: sharing pods must
all be one time-sliced replica of the same size (``nvidia.com/gpu.shared: 1``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduler.extender.watch import apply_pod_event
from scheduler.fgd.model import MILLI
from scheduler.sim.errors import TraceError
from scheduler.sim.policies.base import Batch, Context, Policy, make_batch, register
from scheduler.sim.policies.most_allocated import MostAllocatedPolicy


def node_object(
    name: str, cpu_milli: int, memory_mib: int, gpus: int, model: str, replicas: int
) -> dict[str, Any]:
    """A v1.Node as GPU feature discovery and the device plugin advertise it (time-sliced replicas renamed)."""
    from scheduler.extender.resources import GPU_COUNT_LABEL, GPU_PRODUCT_LABEL, GPU_REPLICAS_LABEL
    from scheduler.labels import GPU_RESOURCE, SHARED_GPU_RESOURCE

    alloc = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "pods": "110", GPU_RESOURCE: str(gpus)}
    labels = {GPU_PRODUCT_LABEL: model, GPU_COUNT_LABEL: str(gpus)}
    if replicas > 1:
        alloc[SHARED_GPU_RESOURCE] = str(gpus * replicas)
        labels[GPU_REPLICAS_LABEL] = str(replicas)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def pod_object(
    uid: str, cpu_milli: int, memory_mib: int, num_gpu: int, gpu_milli: int, spec: str
) -> dict[str, Any]:
    """A v1.Pod asking for the shape: whole GPUs as ``nvidia.com/gpu``, a share as one replica."""
    from scheduler.extender.resources import GPU_PRODUCT_LABEL
    from scheduler.labels import GPU_RESOURCE, SHARED_GPU_RESOURCE

    requests: dict[str, str] = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}
    limits: dict[str, str] = {}
    if num_gpu and gpu_milli < MILLI:
        limits[SHARED_GPU_RESOURCE] = "1"
    elif num_gpu:
        limits[GPU_RESOURCE] = str(num_gpu)
    pod_spec: dict[str, Any] = {
        "schedulerName": "gpu-binpack",
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": limits}}
        ],
    }
    models = [m for m in spec.split("|") if m]
    if models and num_gpu:
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": models}]}]}}}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": uid, "namespace": "team-sim", "uid": uid},
        "spec": pod_spec,
    }


@register
class FgdExtenderPolicy(Policy):
    """``http=False`` (the default) hands each request to the extender's verbs in-process, parsed by the same
    wire functions the HTTP app uses (``wire.parse_args``) but without encoding and
    decoding JSON; ``http=True`` goes through the WSGI app byte for byte, as kube-scheduler's HTTP client
    would. Both place every pod on the same node (tested); the HTTP path costs about a fifth more."""

    name = "FGD-Extender"
    uses_share_gpu = False

    def __init__(self, http: bool = False) -> None:
        self.http = http

    def bind(self, ctx: Context) -> None:
        from scheduler.extender.app import call, make_app
        from scheduler.extender.view import ExtenderView

        super().bind(ctx)
        sh, c = ctx.shapes, ctx.cluster
        share_milli = sorted({int(d) for d in sh.gpu_milli[sh.is_share].tolist()})
        if (
            len(share_milli) > 1
            or (share_milli and MILLI // (MILLI // share_milli[0]) != share_milli[0])  # 1000 // replicas
            or (share_milli and ctx.share_rule != "distributed")
        ):
            raise TraceError(
                "FGD-Extender replays pods as the API expresses them: use the as-deployed mapping "
                "(every sharing pod one time-sliced replica)"
            )
        self.replicas = MILLI // share_milli[0] if share_milli else 1
        self.view = ExtenderView(expected=ctx.target)
        self.view.load_nodes(
            node_object(n, int(cpu), int(mem), int(g), m, self.replicas)
            for n, cpu, mem, g, m in zip(
                c.names, c.cpu_milli, c.memory_mib, c.num_gpu, c.gpu_model, strict=True
            )
        )
        self.app = make_app(self.view)
        self._call = call if self.http else self._direct
        self.fallback = MostAllocatedPolicy()
        self.fallback.bind(ctx)
        self.pods = 0
        self.errors = 0
        self.names = np.array(c.names, dtype=object)

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        return np.zeros(len(batch.nodes), dtype=np.int64), None  # kube-scheduler's filters: fit or not

    def choose_node(self, column: np.ndarray, s: int) -> int:
        candidates = np.flatnonzero(column >= 0)
        if not len(candidates):
            return -1
        sh = self.ctx.shapes
        c, m, k, d = sh.requests[s]
        self.pods += 1
        uid = f"pod-{self.pods:07d}"
        pod = pod_object(uid, c, m, k, d, sh.spec[s])
        names = self.names[candidates].tolist()
        status, result = self._call(self.app, "filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
        if status != 200 or result.get("Error"):
            return self._fallback(candidates, s)
        passed = result.get("NodeNames") or []
        if not passed:
            return -1
        prio: list[dict[str, Any]] = []
        if len(passed) > 1:  # kube-scheduler asks prioritize only when there is a choice
            status, prio = self._call(
                self.app, "prioritize", {"Pod": pod, "Nodes": None, "NodeNames": passed}
            )
            if status != 200:
                return self._fallback(candidates, s)
        best = (
            passed[0] if len(passed) == 1 else max(prio, key=lambda h: h["Score"])["Host"]
        )  # the first of equals
        apply_pod_event(
            self.view, "MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": best}}
        )  # the watch
        return self._index(best)

    def _direct(self, _app: Any, verb: str, body: Any) -> tuple[int, Any]:
        """The verb as the WSGI app runs it, minus the JSON round trip; a refused request is a 400 as there."""
        from scheduler.extender import wire

        try:
            args = wire.parse_args(body)
            return 200, self.view.filter(args) if verb == "filter" else self.view.prioritize(args)
        except (ValueError, wire.WireError) as exc:
            return 400, {"Error": str(exc)}

    def _index(self, name: str) -> int:
        if not hasattr(self, "_names_index"):
            self._names_index = {n: i for i, n in enumerate(self.ctx.cluster.names)}
        return self._names_index[name]

    def _fallback(self, candidates: np.ndarray, s: int) -> int:
        """The profile without the extender (ignorable): MostAllocated over the same candidates."""
        self.errors += 1
        batch = make_batch(self.ctx, s, candidates)
        score, _ = self.fallback.score(batch)
        return int(candidates[int(np.argmax(np.where(batch.feasible, score, -1)))])
