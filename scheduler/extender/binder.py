"""The extender's bind verb against the API server: post the pod's ``v1.Binding`` within the scheduler's patience.

kube-scheduler waits ``httpTimeout`` for the extender's answer (gpu-binpack: 2 s,
``scheduler.placement.EXTENDER_TIMEOUT``; kubernetes v1.35.8 ``pkg/scheduler/extender.go`` ``NewHTTPExtender``
:88-100, the HTTP client's ``Timeout``). Its ``bind`` asks the binding extender first
(``pkg/scheduler/schedule_one.go`` at v1.35.8, ``bind`` :978-989 → ``extendersBinding`` :992-1008); an error
from an ``ignorable`` extender (a late answer is one) makes it bind through its own DefaultBinder instead. If the
extender's Binding was applied after all, that second Binding gets 409 Conflict ("already assigned"), the
binding cycle fails and ``handleBindingCycleError`` (:356-388) forgets the assumed pod (``Cache.ForgetPod``): until
its informer sees the pod bound, the scheduler counts its GPUs free and can place another pod on them, which the
kubelet then rejects.

So the binder answers well within ``httpTimeout``: the Binding gets :data:`BIND_TIMEOUT_S`, and when the API
server answers 409 or not at all (the Binding may still have been applied), one read of the pod
(:data:`CHECK_TIMEOUT_S`) decides: bound to the target node with the same UID is success, anything else an
error. The client makes no retries of its own, so the two timeouts bound the whole call (1.5 s). What is left
of the race: a Binding that the API server applies only after both (more than 1.5 s late) still meets the
scheduler's own Binding.

The API server's answer to a Binding of a pod that has a node: kubernetes v1.35.8
``pkg/registry/core/pod/storage/storage.go`` ``setPodNodeAndMetadata`` ("pod %v is already assigned to node
%q") wrapped by ``assignPod`` in ``errors.NewConflict`` (HTTP 409); a UID precondition that fails (the pod was
recreated) is a 409 too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import urllib3

from scheduler.extender import wire

BIND_TIMEOUT_S = 1.0  # the Binding POST
CHECK_TIMEOUT_S = 0.5  # the read of the pod after a 409 or no answer
CONFLICT = 409


class BindingFailed(RuntimeError):
    """The pod is not bound to the target node (the message says why)."""


def binding_api(configuration: Any = None) -> Any:
    """A ``CoreV1Api`` for binding: ``configuration`` (default: the loaded one) with the client's retries off,
    so a timeout is the end of a request and not the start of another."""
    from kubernetes import client

    config = configuration or client.Configuration.get_default_copy()
    config.retries = False
    return client.CoreV1Api(client.ApiClient(config))


def _binding(args: wire.BindingArgs) -> Any:
    from kubernetes import client

    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=args.pod_name, namespace=args.pod_namespace, uid=args.pod_uid),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=args.node),
    )


def _message(exc: Any) -> str:
    """An ApiException's Status message (or its reason when the body is no Status)."""
    body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else exc.body
    try:
        return str(json.loads(body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(body or exc.reason)


def _bound_there(core: Any, args: wire.BindingArgs, timeout: float) -> str:
    """Empty if the pod (same UID) is bound to ``args.node``; otherwise what the API server shows instead."""
    from kubernetes.client.exceptions import ApiException

    try:
        reply = core.read_namespaced_pod(
            args.pod_name, args.pod_namespace, _preload_content=False, _request_timeout=timeout
        )
        pod = json.loads(reply.data)
    except ApiException as exc:
        return f"reading the pod: HTTP {exc.status}"
    except urllib3.exceptions.HTTPError as exc:
        return f"reading the pod: {exc}"
    uid = (pod.get("metadata") or {}).get("uid")
    node = (pod.get("spec") or {}).get("nodeName") or ""
    if uid != args.pod_uid:
        return f"the pod now has UID {uid}"
    return "" if node == args.node else f"the pod is on node {node!r}" if node else "the pod has no node"


def _post(core: Any, args: wire.BindingArgs, timeout: float) -> str:
    """Post the Binding: empty on success, else why it may still have been applied (a 409, no answer).

    Raises :class:`BindingFailed` for an answer that rules it out (any other HTTP error)."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespaced_pod_binding(  # POST pods/<name>/binding, as client-go's Pods().Bind
            args.pod_name,
            args.pod_namespace,
            _binding(args),
            _preload_content=False,
            _request_timeout=timeout,
        )
        return ""
    except ApiException as exc:
        if exc.status != CONFLICT:
            raise BindingFailed(f"HTTP {exc.status}: {_message(exc)}") from exc
        return f"HTTP 409: {_message(exc)}"
    except urllib3.exceptions.HTTPError as exc:
        return f"no answer from the API server within {timeout:g} s ({type(exc).__name__})"


def make_binder(
    core: Any, bind_timeout: float = BIND_TIMEOUT_S, check_timeout: float = CHECK_TIMEOUT_S
) -> Callable[[wire.BindingArgs], None]:
    """The view's binder: post the Binding through ``core`` (a ``CoreV1Api``, best from :func:`binding_api`);
    raises :class:`BindingFailed` unless the pod ends up bound to the target node."""

    def bind(args: wire.BindingArgs) -> None:
        doubt = _post(core, args, bind_timeout)
        if not doubt:
            return
        elsewhere = _bound_there(core, args, check_timeout)
        if elsewhere:
            raise BindingFailed(f"{doubt}; {elsewhere}")

    return bind
