"""The extender's binder against an API server on loopback, through the official client as the extender builds
it (scheduler.extender.binder.binding_api).

The stand-in API server answers the two calls the binder makes as kube-apiserver v1.35.8 does:
- ``POST /api/v1/namespaces/{ns}/pods/{name}/binding``: 201 with a Status; a pod that has a node, or whose UID
  is not the Binding's (the UID precondition), is 409 Conflict (``pkg/registry/core/pod/storage/storage.go``
  ``setPodNodeAndMetadata`` "pod %v is already assigned to node %q", ``assignPod`` → ``errors.NewConflict``);
- ``GET /api/v1/namespaces/{ns}/pods/{name}``: the pod.
It can be slow: answer late after applying a Binding (the write happened, the reply did not come in time), or
apply it late.

kube-scheduler gives the extender's bind ``httpTimeout`` (kubernetes v1.35.8 ``pkg/scheduler/extender.go``,
the HTTP client's ``Timeout``; gpu-binpack's value from ``scheduler.placement``), and on an error from an
ignorable extender binds again itself (``pkg/scheduler/schedule_one.go`` ``extendersBinding``); that second
Binding's 409 makes ``handleBindingCycleError`` forget the assumed pod. So the binder must answer in time and
call a pod already bound to the target node a success.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scheduler.extender import wire
from scheduler.extender.app import call, make_app
from scheduler.extender.binder import BindingFailed, binding_api, make_binder
from scheduler.extender.view import ExtenderView
from scheduler.placement import extender_entry
from scheduler.sim.policies.fgd_extender import node_object, pod_object


def http_timeout_s() -> float:
    """gpu-binpack's httpTimeout for the extender, as the stacks render it ("2s")."""
    value = extender_entry("http://127.0.0.1:8888", ["nvidia.com/gpu"])["httpTimeout"]
    assert value.endswith("s") and not value.endswith("ms"), value
    return float(value[:-1])


@dataclass
class Pod:
    uid: str
    node: str = ""


@dataclass
class ApiServer:
    """The pods and how slow each call is: ``reply_late`` after applying a Binding, ``apply_late`` before it,
    ``read_late`` before answering a GET."""

    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    reply_late: float = 0.0
    apply_late: float = 0.0
    read_late: float = 0.0
    status: int = 0  # answer every Binding with this status instead (0: behave)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def binding(self, ns: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.status:
            return self.status, status_doc(self.status, "Forbidden", f'pods "{name}" is forbidden')
        self.stop.wait(self.apply_late)
        pod = self.pods.get((ns, name))
        if pod is None:
            return 404, status_doc(404, "NotFound", f'pods "{name}" not found')
        if body["metadata"].get("uid") not in (None, pod.uid):
            return 409, conflict(name, f"Precondition failed: UID in precondition: {body['metadata']['uid']}, "
                                       f"UID in object meta: {pod.uid}")  # fmt: skip
        if pod.node:
            return 409, conflict(name, f'pod {name} is already assigned to node "{pod.node}"')
        pod.node = body["target"]["name"]
        self.stop.wait(self.reply_late)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def read(self, ns: str, name: str) -> tuple[int, dict[str, Any]]:
        self.stop.wait(self.read_late)
        pod = self.pods.get((ns, name))
        if pod is None:
            return 404, status_doc(404, "NotFound", f'pods "{name}" not found')
        spec = {"nodeName": pod.node} if pod.node else {}
        return 200, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "uid": pod.uid},
                     "spec": {"containers": [], **spec}}  # fmt: skip


def status_doc(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


def conflict(name: str, why: str) -> dict[str, Any]:
    return status_doc(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": {why}')


def handler(api: ApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def _answer(self, code: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up waiting

        def _where(self) -> tuple[str, str, str]:
            parts = self.path.split("?")[0].strip("/").split("/")  # api v1 namespaces NS pods NAME [binding]
            return parts[3], parts[5], parts[6] if len(parts) > 6 else ""

        def do_POST(self) -> None:
            ns, name, sub = self._where()
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            api.calls.append(("POST", sub, body))
            self._answer(*api.binding(ns, name, body))

        def do_GET(self) -> None:
            ns, name, _ = self._where()
            api.calls.append(("GET", name, None))
            self._answer(*api.read(ns, name))

    return Handler


@pytest.fixture
def api() -> Iterator[tuple[ApiServer, Any]]:
    """The stand-in API server on loopback and a CoreV1Api for it, built the way the extender builds its own."""
    from kubernetes import client

    state = ApiServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state, binding_api(config)
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()


def args(node: str = "n1", uid: str = "uid-p") -> wire.BindingArgs:
    return wire.BindingArgs(pod_name="p", pod_namespace="team", pod_uid=uid, node=node)


def timed_bind(core: Any, binding: wire.BindingArgs) -> tuple[float, BindingFailed | None]:
    start = time.monotonic()
    try:
        make_binder(core)(binding)
        error = None
    except BindingFailed as exc:
        error = exc
    return time.monotonic() - start, error


def test_the_binding_is_posted_as_kube_scheduler_posts_it(api: tuple[ApiServer, Any]) -> None:
    """schedule_one.go extendersBinding / DefaultBinder: Binding{ObjectMeta{Namespace, Name, UID}, Target{Kind:
    Node, Name}} to the pod's binding subresource; the UID makes it a precondition."""
    state, core = api
    state.pods[("team", "p")] = Pod("uid-p")
    make_binder(core)(args("n1"))
    assert state.pods[("team", "p")].node == "n1"
    ((method, sub, body),) = state.calls
    assert (method, sub) == ("POST", "binding")
    assert body["metadata"] == {"name": "p", "namespace": "team", "uid": "uid-p"}
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}


def test_a_pod_already_bound_to_the_target_node_is_a_success(api: tuple[ApiServer, Any]) -> None:
    state, core = api
    state.pods[("team", "p")] = Pod("uid-p", node="n1")
    make_binder(core)(args("n1"))
    assert [c[0] for c in state.calls] == ["POST", "GET"]  # the 409, then the read that settles it


@pytest.mark.parametrize(
    ("pod", "expected"),
    [(Pod("uid-p", node="n2"), "on node 'n2'"), (Pod("uid-new"), "UID uid-new")],
    ids=["bound-elsewhere", "recreated"],
)
def test_a_conflict_that_is_not_our_binding_is_an_error(
    api: tuple[ApiServer, Any], pod: Pod, expected: str
) -> None:
    state, core = api
    state.pods[("team", "p")] = pod
    with pytest.raises(BindingFailed, match="HTTP 409") as info:
        make_binder(core)(args("n1"))
    assert expected in str(info.value)


def test_other_api_errors_fail_at_once(api: tuple[ApiServer, Any]) -> None:
    state, core = api
    state.pods[("team", "p")] = Pod("uid-p")
    state.status = 403
    with pytest.raises(BindingFailed, match='HTTP 403: pods "p" is forbidden'):
        make_binder(core)(args("n1"))
    assert [c[0] for c in state.calls] == ["POST"]


@pytest.mark.parametrize(
    ("slow", "bound"),
    [
        ({"reply_late": 5.0}, True),
        ({"apply_late": 5.0}, False),
        ({"apply_late": 5.0, "read_late": 5.0}, False),
    ],
    ids=["applied-answer-late", "applied-late", "api-server-hangs"],
)
def test_a_slow_api_server_is_answered_within_the_schedulers_http_timeout(
    api: tuple[ApiServer, Any], slow: dict[str, float], bound: bool
) -> None:
    """The binder answers before kube-scheduler stops waiting: success when the Binding was applied (the pod
    reads as bound to the node), an error otherwise, so the scheduler's own fallback is not raced by a
    Binding still in flight that it would then see as 409."""
    state, core = api
    state.pods[("team", "p")] = Pod("uid-p")
    for key, value in slow.items():
        setattr(state, key, value)
    elapsed, error = timed_bind(core, args("n1"))
    assert elapsed < http_timeout_s(), elapsed
    assert (error is None) is bound, error
    if error is not None:
        assert "no answer from the API server" in str(error)


def test_the_bind_verb_keeps_the_pod_counted_when_it_is_already_bound_there(
    api: tuple[ApiServer, Any],
) -> None:
    """Through the extender's HTTP face: ExtenderBindingResult.Error is empty and the view still holds the
    pod's GPUs; bound elsewhere, the error reaches the scheduler and the GPUs are given back."""
    state, core = api
    view = ExtenderView(binder=make_binder(core))
    view.load_nodes([node_object("n1", 8000, 16384, 2, "A10", 1)])
    app = make_app(view)
    for uid, node, on in (("uid-a", "n1", "n1"), ("uid-b", "n1", "n2")):
        name = uid.removeprefix("uid-")
        state.pods[("team", name)] = Pod(uid, node=on)
        _, filtered = call(
            app, "filter", {"Pod": pod_object(uid, 1000, 1024, 1, 1000, ""), "NodeNames": ["n1"]}
        )
        assert filtered["NodeNames"] == ["n1"]
        binding = {"PodName": name, "PodNamespace": "team", "PodUID": uid, "Node": node}
        status, result = call(app, "bind", binding)
        assert status == 200
        if on == node:
            assert result["Error"] == "" and view.placement(uid) is not None
        else:
            assert "on node 'n2'" in result["Error"] and view.placement(uid) is None
