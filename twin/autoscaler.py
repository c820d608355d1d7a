"""A stand-in for the autoscaler's scale-up on the twin: nodes of the stack's pools appear when work needs them.

The cluster-autoscaler cannot be built here (the Go module proxy refuses every version of
k8s.io/autoscaler/cluster-autoscaler), so the twin plays its documented contract, no more:

- **ProvisioningRequests** of class `best-effort-atomic-scale-up.autoscaling.x-k8s.io` (what Kueue's
  provisioning admission check creates, one PodTemplate per pod set with the flavor's node selector merged in,
  kueue v0.19.2 pkg/controller/admissionchecks/provisioning): the request is provisioned all or nothing
  ("atomic": cluster-autoscaler docs, ProvisioningRequest, "best-effort-atomic-scale-up ... scales up only if
  it can provision all the pods at once"). The pods are fitted into the free room of the pool's existing nodes,
  then into new nodes up to the pool's maxSize; if they fit, the nodes are added and the request gets
  `Provisioned=True`, otherwise `Provisioned=False` (reason `NotProvisioned`) and it is tried again.
- **Unschedulable pods** (PodScheduled=False, reason Unschedulable) in a pool's node selector: one node of that
  pool is added per pass while the pool is below its maxSize, as the autoscaler scales a node group up for a
  pod its node template fits (cluster-autoscaler FAQ, "How does scale-up work").

Nodes come from the same templates the twin registers its nodes with (`twin.nodes`, the pool at maxSize),
after `delay` seconds (a provisioning time). Scale-down is not played: nodes stay until the twin stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.spec import ClusterSpec
from scheduler.labels import POOL_LABEL
from twin.nodes import TwinNode, twin_nodes

log = logging.getLogger(__name__)
GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "nvidia.com/gpu.shared", "vpc.amazonaws.com/efa")


def quantity(value: Any) -> float:
    from kubernetes.utils import parse_quantity

    return float(parse_quantity(str(value))) if value is not None else 0.0


def pod_requests(spec: dict[str, Any]) -> dict[str, float]:
    """A pod's requests per resource (containers summed; a missing request defaults to its limit)."""
    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, 0.0) + quantity(value)
    return total


def fits(request: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(name, 0.0) >= amount for name, amount in request.items() if amount)


def take(request: dict[str, float], free: dict[str, float]) -> None:
    for name, amount in request.items():
        free[name] = free.get(name, 0.0) - amount


@dataclass
class Pool:
    name: str
    templates: list[TwinNode]  # every node the pool can have, in name order


class Autoscaler:
    """The scale-up stand-in, run on a thread of the twin's session."""

    def __init__(self, spec: ClusterSpec, kubeconfig: Path, delay: float = 1.0, every: float = 1.0) -> None:
        self.delay, self.every = delay, every
        self.pools: dict[str, Pool] = {}
        for node in twin_nodes(spec, "max"):
            if node.pool:
                self.pools.setdefault(node.pool, Pool(node.pool, [])).templates.append(node)
        self.kubeconfig = kubeconfig
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.added: list[str] = []

    # ---- cluster state ------------------------------------------------------------------------------

    def _clients(self) -> tuple[Any, Any]:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        return client.CoreV1Api(api), client.CustomObjectsApi(api)

    def _free(self, core: Any, pool: str) -> list[dict[str, float]]:
        """Free room on each existing node of `pool` (allocatable less the requests of the pods bound there)."""
        nodes = core.list_node(label_selector=f"{POOL_LABEL}={pool}").items
        pods = core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed"
        ).items
        used: dict[str, dict[str, float]] = {}
        for p in pods:
            if p.spec.node_name:
                req = pod_requests(core.api_client.sanitize_for_serialization(p.spec))
                bucket = used.setdefault(p.spec.node_name, {})
                for name, amount in req.items():
                    bucket[name] = bucket.get(name, 0.0) + amount
        out = []
        for node in nodes:
            alloc = {k: quantity(v) for k, v in (node.status.allocatable or {}).items()}
            for name, amount in used.get(node.metadata.name, {}).items():
                alloc[name] = alloc.get(name, 0.0) - amount
            out.append(alloc)
        return out

    def _existing(self, core: Any) -> set[str]:
        return {n.metadata.name for n in core.list_node().items}

    def _add(self, core: Any, pool: str, count: int) -> list[str]:
        existing = self._existing(core)
        new = [t for t in self.pools[pool].templates if t.name not in existing][:count]
        if self.delay:
            time.sleep(self.delay)
        for template in new:
            core.create_node(template.manifest())
            self.added.append(template.name)
            log.info("added node %s to pool %s", template.name, pool)
        return [t.name for t in new]

    # ---- what the autoscaler acts on ------------------------------------------------------------------

    def plan(self, pool: str, requests: Iterable[dict[str, float]], free: list[dict[str, float]],
             room: int) -> int | None:  # fmt: skip
        """New nodes that host every pod of `requests` after the existing nodes' free room, or None."""
        if pool not in self.pools:
            return None
        capacity = {k: quantity(v) for k, v in self.pools[pool].templates[0].allocatable.items()}
        spaces = [dict(f) for f in free]
        added = 0
        for request in requests:
            spot = next((s for s in spaces if fits(request, s)), None)
            if spot is None:
                if not fits(request, capacity) or added >= room:
                    return None
                spot = dict(capacity)
                spaces.append(spot)
                added += 1
            take(request, spot)
        return added

    def _provisioning_requests(self, core: Any, custom: Any) -> None:
        listed = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        for pr in listed.get("items", []):
            if pr["spec"].get("provisioningClassName") != ATOMIC:
                continue
            conditions = {c["type"]: c["status"] for c in pr.get("status", {}).get("conditions", [])}
            if conditions.get("Provisioned") == "True" or conditions.get("Failed") == "True":
                continue
            ns = pr["metadata"]["namespace"]
            by_pool: dict[str, list[dict[str, float]]] = {}
            unknown = False
            for pod_set in pr["spec"]["podSets"]:
                template = core.read_namespaced_pod_template(pod_set["podTemplateRef"]["name"], ns)
                spec = core.api_client.sanitize_for_serialization(template.template.spec)
                pool = (spec.get("nodeSelector") or {}).get(POOL_LABEL)
                if pool is None:
                    unknown = True
                    break
                by_pool.setdefault(pool, []).extend([pod_requests(spec)] * int(pod_set["count"]))
            existing = self._existing(core)
            plans = {}
            for pool, requests in by_pool.items():
                room = sum(
                    1 for t in self.pools.get(pool, Pool(pool, [])).templates if t.name not in existing
                )
                plans[pool] = None if unknown else self.plan(pool, requests, self._free(core, pool), room)
            if plans and all(n is not None for n in plans.values()):
                for pool, count in plans.items():
                    if count:
                        self._add(core, pool, int(count))
                self._set(custom, pr, "True", "Provisioned", "capacity is available for every pod")
            else:
                self._set(custom, pr, "False", "NotProvisioned", "the pool cannot host all pods at once")

    def _set(self, custom: Any, pr: dict[str, Any], status: str, reason: str, message: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        generation = pr["metadata"].get("generation", 1)
        conditions = [
            c
            for c in pr.get("status", {}).get("conditions", [])
            if c["type"] not in ("Accepted", "Provisioned")
        ]
        for kind, value, why in (("Accepted", "True", "Accepted"), ("Provisioned", status, reason)):
            conditions.append({"type": kind, "status": value, "reason": why, "message": message,
                               "lastTransitionTime": now, "observedGeneration": generation})  # fmt: skip
        body = {"status": {"conditions": conditions}}
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, pr["metadata"]["namespace"], PLURAL, pr["metadata"]["name"], body
        )

    def _unschedulable(self, core: Any) -> None:
        pods = core.list_pod_for_all_namespaces(field_selector="status.phase=Pending").items
        wanted: dict[str, int] = {}
        for p in pods:
            if p.spec.node_name or p.spec.scheduling_gates:
                continue
            conditions = {c.type: c for c in (p.status.conditions or [])}
            scheduled = conditions.get("PodScheduled")
            if scheduled is None or scheduled.status != "False" or scheduled.reason != "Unschedulable":
                continue
            pool = (p.spec.node_selector or {}).get(POOL_LABEL)
            if pool in self.pools:
                wanted[pool] = 1
        for pool in wanted:
            self._add(core, pool, 1)

    def step(self) -> None:
        core, custom = self._clients()
        try:
            self._provisioning_requests(core, custom)
        except Exception as exc:  # the CRD is not served (no provisioningRequests): nothing to do
            if getattr(exc, "status", None) != 404:
                raise
        self._unschedulable(core)

    # ---- the thread ------------------------------------------------------------------------------------

    def start(self) -> Autoscaler:
        def loop() -> None:
            while not self._stop.wait(self.every):
                try:
                    self.step()
                except Exception:
                    log.exception("the autoscaler stand-in's pass failed; trying again")

        self._thread = threading.Thread(target=loop, name="twin-autoscaler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
