"""The stand-in's loop: what cluster-autoscaler does each scan interval, applied to the twin's API server.

Each pass: nodes whose provisioning time has run out join; booked ProvisioningRequests past their reservation
expire; one ProvisioningRequest is tried (twin.autoscaler.provisioning); unschedulable pods scale one group up
(twin.autoscaler.fit for what fits, the priority expander's tiers then least waste for which group, as
`--expander=priority,least-waste` picks, expander/waste/waste.go); empty nodes above their group's minimum go
after the group's unneeded time, once the cool-down after the last scale-up has passed. Every duration is
multiplied by `time_scale`, so a test can run the autoscaler's clock faster than the wall's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from infra.spec import ClusterSpec
from scheduler.autoscaling import CONFIGMAP as PRIORITY_CONFIGMAP
from scheduler.provisioning import answer, retry_after
from twin.autoscaler import provisioning as pr_rules
from twin.autoscaler.fit import new_nodes, place, pod_requests, quantity, rejections, take
from twin.autoscaler.groups import DELAY_AFTER_ADD_S, NODEGROUP_LABEL, NodeGroup, node_groups, priority_order
from twin.listing import listed
from twin.nodes import TwinNode

log = logging.getLogger("twin.autoscaler")
GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
COMPONENT = "cluster-autoscaler"
MAX_SIZE_REACHED = "max node group size reached"  # core/scaleup/orchestrator/skippedreasons.go:46


@dataclass
class Coming:
    group: str
    node: TwinNode
    ready_at: float
    room: dict[str, float]  # what the autoscaler expects of it: the template it scaled up with


class Autoscaler:
    """The cluster-autoscaler stand-in, run on a thread of the twin's session."""

    def __init__(
        self, spec: ClusterSpec, kubeconfig: Path, time_scale: float = 1.0, every: float = 1.0
    ) -> None:
        self.scale, self.every = time_scale, every
        self.groups = {g.name: g for g in node_groups(spec)}
        self.kubeconfig = kubeconfig
        self.coming: list[Coming] = []
        self.last_scale_up = time.monotonic()  # the autoscaler's start counts as one (static_autoscaler.go)
        self.unneeded_since: dict[str, float] = {}
        self.not_found: dict[str, int] = {}  # per request, its `CapacityIsNotFound` answers in a row
        self.told: set[str] = set()
        self.seen: dict[str, dict[str, float]] = {}
        self.daemon_pods: list[dict[str, Any]] = []  # the DaemonSets' pod specs, read each pass
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api: Any = None  # the loop's API client (`_clients`)

    # ---- the cluster as the autoscaler's snapshot ----------------------------------------------------

    def _clients(self) -> tuple[Any, Any]:
        """One client for the thread's life: a new one would cost a TLS handshake each pass."""
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        from kubernetes import client

        return client.CoreV1Api(self._api), client.CustomObjectsApi(self._api)

    def _snapshot(self, core: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        nodes = listed(core.list_node)
        pods = listed(
            core.list_pod_for_all_namespaces, field_selector="status.phase!=Succeeded,status.phase!=Failed"
        )
        return nodes, pods

    def _daemonsets(self, core: Any) -> list[dict[str, Any]]:
        from kubernetes import client

        items = listed(client.AppsV1Api(core.api_client).list_daemon_set_for_all_namespaces)
        return [d["spec"]["template"]["spec"] for d in items]

    def _free(
        self, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
    ) -> dict[str, list[dict[str, float]]]:
        """Free room per group: each node's allocatable less its pods' requests, and each coming node whole."""
        used: dict[str, dict[str, float]] = {}
        for p in pods:
            node = p["spec"].get("nodeName")
            if node:
                bucket = used.setdefault(node, {})
                for name, amount in pod_requests(p["spec"]).items():
                    bucket[name] = bucket.get(name, 0.0) + amount
        out: dict[str, list[dict[str, float]]] = {g: [] for g in self.groups}
        for n in nodes:
            group = n["metadata"].get("labels", {}).get(NODEGROUP_LABEL, "")
            if group not in out or n["spec"].get("unschedulable"):
                continue
            free = {k: quantity(v) for k, v in (n["status"].get("allocatable") or {}).items()}
            if not self._gpus_ready(self.groups[group], free):
                # an upcoming node until its plugin reports: the template, DaemonSet pods included
                out[group].append(self._template(self.groups[group], []))
                continue
            for name, amount in used.get(n["metadata"]["name"], {}).items():
                free[name] = free.get(name, 0.0) - amount
            out[group].append(free)
        for (
            c
        ) in self.coming:  # upcoming nodes are the template (static_autoscaler.go:1094 getUpcomingNodeInfos)
            out[c.group].append(dict(c.room))
        return out

    def _sizes(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
        names = {g: set() for g in self.groups}  # type: dict[str, set[str]]
        for n in nodes:
            group = n["metadata"].get("labels", {}).get(NODEGROUP_LABEL, "")
            if group in names:
                names[group].add(n["metadata"]["name"])
        for c in self.coming:
            names[c.group].add(c.node.name)
        return names

    @staticmethod
    def _gpus_ready(group: NodeGroup, allocatable: Mapping[str, float]) -> bool:
        """Whether the node offers the GPU resources its group's template has. Until its device plugin reports,
        cluster-autoscaler counts a GPU node as not ready, an upcoming node of the group, and takes no
        template from it (processors/customresources/gpu_processor.go, `FilterOutNodesWithUnreadyResources`)."""
        return all(
            allocatable.get(k, 0.0) > 0
            for k, v in group.capacity.items()
            if k.startswith("nvidia.com/") and v
        )

    def _template(self, group: NodeGroup, nodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """A node of the group if there is one (its allocatable), else the last one seen (the autoscaler caches
        node infos of real nodes, processors/nodeinfosprovider/mixed_nodeinfos_processor.go), else the AWS
        template from the instance type (capacity); less the requests of the DaemonSet pods a fresh node of the
        group runs (simulator/node_info_utils.go:62-80, `podsExpectedOnFreshNode`)."""
        room = dict(self.seen.get(group.name, group.capacity))
        for n in nodes:
            if n["metadata"].get("labels", {}).get(NODEGROUP_LABEL) == group.name:
                example = {k: quantity(v) for k, v in (n["status"].get("allocatable") or {}).items()}
                if self._gpus_ready(group, example):
                    room = dict(example)
                    self.seen[group.name] = dict(example)
                    break
        for spec in self.daemon_pods:
            if not rejections(spec, group.labels, group.taints, {}, requests=False):
                take(pod_requests(spec), room)
        return room

    def _priorities(self, core: Any) -> dict[int, list[str]]:
        from kubernetes.client.exceptions import ApiException

        try:
            cm = core.read_namespaced_config_map(PRIORITY_CONFIGMAP, "kube-system")
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        parsed = yaml.safe_load((cm.data or {}).get("priorities", "") or "{}") or {}
        return {int(k): [str(p) for p in v] for k, v in parsed.items()}

    # ---- scale-up ----------------------------------------------------------------------------------------

    def _options(self, specs: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
                 free: Mapping[str, list[dict[str, float]]], sizes: Mapping[str, int]
                 ) -> tuple[dict[str, tuple[int, list[int]]], dict[int, list[str]]]:  # fmt: skip
        """Per group: (new nodes, indexes of the pods they host); per pod: why each group cannot take it."""
        options: dict[str, tuple[int, list[int]]] = {}
        why: dict[int, list[str]] = {i: [] for i in range(len(specs))}
        for name, group in self.groups.items():
            template = self._template(group, nodes)
            room = group.max_size - sizes[name]
            fitting = []
            for i, spec in enumerate(specs):
                reasons = rejections(spec, group.labels, group.taints, template)
                if reasons:
                    why[i] += reasons
                elif room <= 0:
                    why[i].append(MAX_SIZE_REACHED)
                else:
                    fitting.append(i)
            if fitting:
                count, placed, _rooms = place(
                    [pod_requests(specs[i]) for i in fitting], free[name], template, room
                )
                if count:
                    options[name] = (count, [fitting[i] for i in placed])
        return options, why

    def _best(self, options: Mapping[str, tuple[int, list[int]]], specs: Sequence[Mapping[str, Any]],
              nodes: Sequence[Mapping[str, Any]], priorities: dict[int, list[str]]) -> str | None:  # fmt: skip
        """The priority expander's highest tier with an option, then the least wasted cpu and memory."""
        for tier in priority_order(priorities, list(options)):
            if not tier:
                continue

            def waste(name: str) -> float:
                count, pods = options[name]
                template = self._template(self.groups[name], nodes)
                score = 0.0
                for resource in ("cpu", "memory"):
                    have = template.get(resource, 0.0) * count
                    asked = sum(pod_requests(specs[i]).get(resource, 0.0) for i in pods)
                    score += (have - asked) / have if have else 0.0
                return score

            return min(tier, key=waste)
        return None

    def _add(
        self, group: NodeGroup, count: int, sizes: Mapping[str, set[str]], room: dict[str, float]
    ) -> list[str]:
        new = [n for n in group.nodes if n.name not in sizes[group.name]][:count]
        ready_at = time.monotonic() + group.provision_s * self.scale
        self.coming += [Coming(group.name, n, ready_at, dict(room)) for n in new]
        self.last_scale_up = time.monotonic()
        log.info(
            "scale-up: group %s %d->%d", group.name, len(sizes[group.name]), len(sizes[group.name]) + len(new)
        )
        return [n.name for n in new]

    def _join(self, core: Any) -> None:
        now = time.monotonic()
        for c in [c for c in self.coming if c.ready_at <= now]:
            core.create_node(c.node.manifest())
            self.coming.remove(c)
            log.info("node %s of group %s is Ready", c.node.name, c.group)

    def _event(self, core: Any, pod: Mapping[str, Any], reason: str, message: str) -> None:
        meta = pod["metadata"]
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "reason": reason, "message": message, "type": "Normal", "source": {"component": COMPONENT},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }  # fmt: skip
        core.create_namespaced_event(meta["namespace"], body)

    def _unschedulable(self, core: Any, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        waiting = []
        for p in pods:
            if (
                p["spec"].get("nodeName")
                or p["spec"].get("schedulingGates")
                # core/podlistprocessor/filter_out_daemon_sets.go: DaemonSet pods never scale a group up
                or any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
                or p["status"].get("phase") != "Pending"
            ):
                continue
            scheduled = next(
                (c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None
            )
            if scheduled and scheduled["status"] == "False" and scheduled.get("reason") == "Unschedulable":
                waiting.append(p)
        if not waiting:
            return
        free, sizes = self._free(nodes, pods), self._sizes(nodes)
        # Pods that fit the room there is (or is coming) wait for the scheduler, not for a new node.
        rooms = [dict(r) for group in free.values() for r in group]
        stuck = []
        for p in waiting:
            request = pod_requests(p["spec"])
            spot = next((r for r in rooms if all(r.get(k, 0.0) >= v for k, v in request.items() if v)), None)
            if spot is None:
                stuck.append(p)
            else:
                for k, v in request.items():
                    spot[k] = spot.get(k, 0.0) - v
        specs = [p["spec"] for p in stuck]
        options, why = self._options(specs, nodes, free, {g: len(names) for g, names in sizes.items()})
        best = self._best(options, specs, nodes, self._priorities(core)) if options else None
        if best is not None:
            count, hosted = options[best]
            group = self.groups[best]
            before = len(sizes[best])
            self._add(group, count, sizes, self._template(group, nodes))
            info = f"[{{{best} {before}->{before + count} (max: {group.max_size})}}]"
            for i in hosted:
                self._event(core, stuck[i], "TriggeredScaleUp", f"pod triggered scale-up: {info}")
            return
        for i, p in enumerate(stuck):  # no scale-up this loop: say why, once per pod
            uid = p["metadata"]["uid"]
            if uid in self.told:
                continue
            self.told.add(uid)
            counts: dict[str, int] = {}
            for reason in why[i]:
                counts[reason] = counts.get(reason, 0) + 1
            message = ", ".join(f"{n} {r}" for r, n in counts.items())
            self._event(core, p, "NotTriggerScaleUp", f"pod didn't trigger scale-up: {message}")

    # ---- ProvisioningRequests ---------------------------------------------------------------------------

    def _patch(self, custom: Any, pr: Mapping[str, Any], rule: tuple[str, str, str], status: str) -> None:
        conditions = pr_rules.with_condition(pr.get("status", {}).get("conditions", []), rule, status,
                                             datetime.now(UTC), pr["metadata"].get("generation", 1))  # fmt: skip
        pr.setdefault("status", {})["conditions"] = conditions  # type: ignore[attr-defined]
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, pr["metadata"]["namespace"], PLURAL,
                                                     pr["metadata"]["name"], {"status": {"conditions": conditions}})  # fmt: skip

    def _provisioning(
        self, core: Any, custom: Any, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            requests = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL).get("items", [])
        except ApiException as exc:
            if exc.status == 404:  # the CRD is not served (no provisioningRequests): nothing to do
                return
            raise
        now = datetime.now(UTC)
        for pr in requests:
            if pr_rules.booking_over(pr, now, self.scale):
                self._patch(custom, pr, pr_rules.BOOKING_EXPIRED, "True")
        key = lambda pr: f"{pr['metadata']['namespace']}/{pr['metadata']['name']}"  # noqa: E731
        pr = next((p for p in requests if pr_rules.may_try(
            p, now, retry_after(max(self.not_found.get(key(p), 0), 1), self.scale))), None)  # fmt: skip
        if pr is None:
            return
        if not pr_rules.is_true(pr, "Accepted"):
            self._patch(custom, pr, pr_rules.ACCEPTED, "True")
        specs: list[dict[str, Any]] = []
        for pod_set in pr["spec"]["podSets"]:
            template = core.read_namespaced_pod_template(
                pod_set["podTemplateRef"]["name"], pr["metadata"]["namespace"]
            )
            specs += [core.api_client.sanitize_for_serialization(template.template.spec)] * int(
                pod_set["count"]
            )
        free, sizes = self._free(nodes, pods), self._sizes(nodes)
        rooms = [dict(r) for group in free.values() for r in group]
        _count, left = new_nodes([pod_requests(s) for s in specs], rooms, {}, 0)
        plan: dict[str, int] = {}

        def scale_up() -> bool:
            found = self._atomic(specs, nodes, free, sizes, self._priorities(core))
            plan.update(found or {})
            return found is not None

        verdict = answer(left == 0, scale_up)
        for name, count in plan.items():
            self._add(self.groups[name], count, sizes, self._template(self.groups[name], nodes))
        if verdict.provisioned:
            self.not_found.pop(key(pr), None)
        else:
            self.not_found[key(pr)] = self.not_found.get(key(pr), 0) + 1
        self._patch(custom, pr, *pr_rules.CONDITION[verdict])

    def _atomic(self, specs: list[dict[str, Any]], nodes: list[dict[str, Any]],
                free: dict[str, list[dict[str, float]]], sizes: dict[str, set[str]],
                priorities: dict[int, list[str]]) -> dict[str, int] | None:  # fmt: skip
        """New nodes of one group for every pod at once, or None: best-effort-atomic-scale-up asks for an
        all-or-nothing scale-up, which drops every expansion option whose estimate does not host all the pods
        (cluster-autoscaler 1.35.2 core/scaleup/orchestrator/orchestrator.go:155, `allOrNothing`)."""
        counts = {g: len(names) for g, names in sizes.items()}
        options, _why = self._options(specs, nodes, free, counts)
        whole = {g: option for g, option in options.items() if len(option[1]) == len(specs)}
        best = self._best(whole, specs, nodes, priorities) if whole else None
        return None if best is None else {best: whole[best][0]}

    # ---- scale-down -------------------------------------------------------------------------------------

    def _scale_down(self, core: Any, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        busy = {
            p["spec"]["nodeName"]
            for p in pods
            if p["spec"].get("nodeName")
            and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
            and "kubernetes.io/config.mirror" not in (p["metadata"].get("annotations") or {})
        }
        sizes = self._sizes(nodes)
        cooling = now - self.last_scale_up < DELAY_AFTER_ADD_S * self.scale
        for n in nodes:
            name = n["metadata"]["name"]
            group = self.groups.get(n["metadata"].get("labels", {}).get(NODEGROUP_LABEL, ""))
            if group is None or name in busy:
                self.unneeded_since.pop(name, None)
                continue
            since = self.unneeded_since.setdefault(name, now)
            if (
                cooling
                or now - since < group.unneeded_s * self.scale
                or len(sizes[group.name]) <= group.min_size
            ):
                continue
            core.delete_node(name)
            sizes[group.name].discard(name)
            self.unneeded_since.pop(name, None)
            log.info("scale-down: removed empty node %s of group %s", name, group.name)

    # ---- the thread -------------------------------------------------------------------------------------

    def step(self) -> None:
        core, custom = self._clients()
        self.daemon_pods = self._daemonsets(core)
        self._join(core)
        nodes, pods = self._snapshot(core)
        self._provisioning(core, custom, nodes, pods)
        nodes, pods = self._snapshot(core)
        self._unschedulable(core, nodes, pods)
        self._scale_down(core, nodes, pods)

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
