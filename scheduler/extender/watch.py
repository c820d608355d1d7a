"""Keep an :class:`~scheduler.extender.view.ExtenderView` from the API server.

Uses the official ``kubernetes`` client: list then watch Nodes and Pods (``resourceVersion`` resumes a watch;
a 410 Gone restarts with a fresh list, as client-go's reflector does; a list replaces what the view held, so
what disappeared meanwhile leaves it). Bound pods (``spec.nodeName`` set, not
Succeeded/Failed) count in the view, and confirm (or move) the view's assumption of where the scheduler put
them; pending GPU pods count in its expected workload (:mod:`scheduler.extender.target`); deleted or finished
pods leave it. kube-scheduler binds the pods itself, so the extender needs only the
rights to list and watch nodes and pods, and with ``--dra-shares`` ResourceSlices and ResourceClaims
(resource.k8s.io/v1), which the scheduler's own role reads too.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from scheduler.extender.resources import pod_request
from scheduler.extender.target import TERMINAL, pools_asked, teaches
from scheduler.extender.view import ExtenderView

log = logging.getLogger(__name__)


def apply_pod_event(view: ExtenderView, kind: str, pod: dict[str, Any]) -> None:
    """One watch event on a Pod (``ADDED``/``MODIFIED``/``DELETED``), as a plain dict: a bound pod counts on
    its node, a pending GPU pod in the expected workload (:mod:`scheduler.extender.target`)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    uid, node = str(meta.get("uid", "")), spec.get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if kind == "DELETED" or phase in TERMINAL:
        view.pod_gone(uid)
        return
    request = pod_request(pod)
    learn = teaches(pod, request)
    if node:
        view.pod_bound(uid, node, request, learn)
    elif learn:
        view.pod_pending(uid, request, pools_asked(pod))


def apply_node_event(view: ExtenderView, kind: str, node: dict[str, Any]) -> None:
    if kind == "DELETED":
        view.delete_node(str((node.get("metadata") or {}).get("name", "")))
    else:
        view.set_node(node)


def replace_nodes(view: ExtenderView, nodes: list[dict[str, Any]]) -> None:
    """A full node list: apply each node, drop the ones it no longer has, mark the node list applied."""
    for node in nodes:
        apply_node_event(view, "ADDED", node)
    view.retain_nodes(str((n.get("metadata") or {}).get("name", "")) for n in nodes)
    view.listed("nodes")


def replace_pods(view: ExtenderView, pods: list[dict[str, Any]]) -> None:
    """A full pod list: apply each pod, drop the placed and pending pods it no longer shows running or
    waiting (a pod is never both: ``spec.nodeName`` is set once)."""
    kept = []
    for pod in pods:
        apply_pod_event(view, "ADDED", pod)
        if (pod.get("status") or {}).get("phase") not in TERMINAL:
            kept.append(str((pod.get("metadata") or {}).get("uid", "")))
    view.retain_pods(kept)
    view.listed("pods")


def apply_slice_event(view: ExtenderView, kind: str, obj: dict[str, Any]) -> None:
    """One watch event on a ResourceSlice, as a plain dict."""
    if view.shares is None:
        return
    with view.lock:
        if kind == "DELETED":
            view.shares.delete_slice(obj)
        else:
            view.shares.set_slice(obj)


def apply_claim_event(view: ExtenderView, kind: str, obj: dict[str, Any]) -> None:
    """One watch event on a ResourceClaim: an allocation confirms the shares assumed for its pods."""
    view.claim_event(kind, obj)


def _names(objs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(str((o.get("metadata") or {}).get("namespace", "")), str((o.get("metadata") or {}).get("name", "")))
            for o in objs]  # fmt: skip


def replace_slices(view: ExtenderView, slices: list[dict[str, Any]]) -> None:
    """A full ResourceSlice list: what it no longer has leaves the view."""
    if view.shares is not None:
        with view.lock:
            view.shares.retain_slices({name for _, name in _names(slices)})
            for obj in slices:
                view.shares.set_slice(obj)
    view.listed("resourceslices")


def replace_claims(view: ExtenderView, claims: list[dict[str, Any]]) -> None:
    """A full ResourceClaim list: what it no longer has leaves the view."""
    if view.shares is not None:
        with view.lock:
            view.shares.retain_claims(set(_names(claims)))
            for obj in claims:
                view.shares.set_claim(obj)
    view.listed("resourceclaims")


def _list(list_fn: Any, raw: bool) -> tuple[list[dict[str, Any]], str]:
    """A list's items as plain dicts and its resourceVersion."""
    import json

    from kubernetes.client import ApiClient

    if raw:
        doc = json.loads(list_fn(_preload_content=False).data)
        return list(doc.get("items") or []), str(doc["metadata"]["resourceVersion"])
    listed = list_fn()
    sanitize = ApiClient().sanitize_for_serialization
    return [sanitize(item) for item in listed.items], listed.metadata.resource_version


def _watch(
    view: ExtenderView, list_fn: Any, replace: Any, apply: Any, stop: threading.Event, raw: bool = False
) -> None:
    """List then watch one kind. ``raw``: take the API server's JSON as it comes, without the client's models
    (its watch looks the resource.k8s.io/v1 models up by a name they do not have, ``V1ResourceClaim`` for
    ``ResourceV1ResourceClaim``, and fails)."""
    from kubernetes import watch
    from kubernetes.client import ApiClient
    from kubernetes.client.exceptions import ApiException

    sanitize = ApiClient().sanitize_for_serialization
    while not stop.is_set():
        try:
            items, version = _list(list_fn, raw)
            replace(view, items)
            options = {"deserialize": False} if raw else {}
            for event in watch.Watch().stream(
                list_fn, resource_version=version, timeout_seconds=300, **options
            ):
                apply(view, event["type"], event["object"] if raw else sanitize(event["object"]))
                if stop.is_set():
                    return
        except ApiException as exc:
            log.warning("watch restarts after %s", exc.status)
        except Exception:
            log.exception("watch failed; restarting")
            stop.wait(2)


def start(view: ExtenderView) -> threading.Event:  # pragma: no cover - needs an API server
    """Load the in-cluster config (or $KUBECONFIG outside a cluster, as on the twin), start the Node and Pod
    watches; returns a stop event."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    core = client.CoreV1Api()
    stop = threading.Event()
    watches: list[tuple[Any, Any, Any, bool]] = [
        (core.list_node, replace_nodes, apply_node_event, False),
        (core.list_pod_for_all_namespaces, replace_pods, apply_pod_event, False),
    ]
    if view.shares is not None:
        resource = client.ResourceV1Api()
        watches += [
            (resource.list_resource_slice, replace_slices, apply_slice_event, True),
            (resource.list_resource_claim_for_all_namespaces, replace_claims, apply_claim_event, True),
        ]
    for list_fn, replace, apply, raw in watches:
        threading.Thread(target=_watch, args=(view, list_fn, replace, apply, stop, raw), daemon=True).start()
    return stop
