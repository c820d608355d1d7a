"""Scheduling preflight: autoscaler chart RBAC for ProvisioningRequests; on existing clusters the GPU taint on
every pool host, two nodes for the platform's pods and a CNI that enforces NetworkPolicies, read through the official Kubernetes client from a
local HTTP server that answers like the API server (core/v1 Node, apps/v1 DaemonSetList, a 404 Status)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from infra.preflight.findings import Severity
from infra.preflight.scheduling import check_existing_cluster, check_provisioning_rbac
from infra.spec import ClusterSpec
from tests.conftest import load_example

TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def node(name: str, taints: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"taints": taints}}


def daemonset(namespace: str, name: str, containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    containers = containers or [{"name": name, "image": f"example/{name}:1"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": containers}},
        },
    }


class FakeApi:
    """The two API paths the checks read, answered with what the API server returns."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.daemonsets: list[dict[str, Any]] = []

    def answer(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/api/v1/nodes":
            return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                         "items": list(self.nodes.values())}  # fmt: skip
        if path.startswith("/api/v1/nodes/"):
            name = path.removeprefix("/api/v1/nodes/")
            if name in self.nodes:
                return 200, self.nodes[name]
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                      "message": f'nodes "{name}" not found', "code": 404}  # fmt: skip
            return 404, status
        if path == "/apis/apps/v1/daemonsets":
            return 200, {
                "apiVersion": "apps/v1",
                "kind": "DaemonSetList",
                "metadata": {},
                "items": self.daemonsets,
            }
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApi, Path]]:
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, body = fake.answer(self.path.split("?")[0])
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "metal",
                "clusters": [
                    {"name": "metal", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                ],
                "contexts": [{"name": "metal", "context": {"cluster": "metal", "user": "admin"}}],
                "users": [{"name": "admin", "user": {"token": "t"}}],
            }
        )
    )
    yield fake, kubeconfig
    server.shutdown()


def metal(kubeconfig: Path) -> ClusterSpec:
    spec = load_example("metal")
    cluster = spec.cluster.model_copy(update={"kubeconfig": str(kubeconfig), "kubeconfig_context": "metal"})
    return spec.model_copy(update={"cluster": cluster})


def hosts(spec: ClusterSpec) -> list[str]:
    return [h for p in spec.node_pools for h in p.hosts or []]


def cpu_nodes(*names: str) -> dict[str, dict[str, Any]]:
    return {n: node(n, []) for n in names}


def test_tainted_hosts_and_an_enforcing_cni_pass(api: tuple[FakeApi, Path]) -> None:
    fake, kubeconfig = api
    spec = metal(kubeconfig)
    fake.nodes = {h: node(h, [TAINT]) for h in hosts(spec)} | cpu_nodes("cpu-1", "cpu-2")
    fake.daemonsets = [daemonset("calico-system", "calico-node"), daemonset("kube-system", "kube-proxy")]
    findings = check_existing_cluster(spec)
    assert {f.severity for f in findings} == {Severity.OK}
    assert len(findings) == len(hosts(spec)) + 2
    assert "2 nodes take the platform's pods (cpu-1, cpu-2)" in findings[-2].message
    assert "calico-system/calico-node" in findings[-1].message


def platform_finding(fake: FakeApi, kubeconfig: Path, others: dict[str, dict[str, Any]]) -> Any:
    spec = metal(kubeconfig)
    fake.nodes = {h: node(h, [TAINT]) for h in hosts(spec)} | others
    fake.daemonsets = [daemonset("kube-system", "cilium")]
    (finding,) = [f for f in check_existing_cluster(spec) if f.subject.startswith("platform nodes")]
    return finding


def test_gpu_hosts_alone_cannot_run_the_platform(api: tuple[FakeApi, Path]) -> None:
    """Every node a GPU host (tainted), the control plane tainted, a CPU node cordoned, another NotReady
    (the node lifecycle controller's `node.kubernetes.io/not-ready:NoExecute`): none takes pods without
    tolerations (kube-scheduler's TaintToleration filter considers NoSchedule and NoExecute taints, and
    NodeUnschedulable `spec.unschedulable`; kubernetes v1.35.8 pkg/scheduler/framework/plugins/tainttoleration,
    nodeunschedulable). A PreferNoSchedule taint only lowers a node's score, so that node counts."""
    fake, kubeconfig = api
    control = node("cp-1", [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}])
    cordoned = node("cpu-1", []) | {"spec": {"unschedulable": True}}
    not_ready = node("cpu-2", [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
    finding = platform_finding(fake, kubeconfig, {"cp-1": control, "cpu-1": cordoned, "cpu-2": not_ready})
    assert finding.severity is Severity.ERROR
    assert "Kueue and the gpu-binpack scheduler would stay Pending" in finding.message
    assert finding.fix.startswith("join 2 more node(s) without NoSchedule/NoExecute taints")

    prefer = node("cpu-3", [{"key": "dedicated", "value": "batch", "effect": "PreferNoSchedule"}])
    one = platform_finding(fake, kubeconfig, {"cpu-1": cordoned, "cpu-3": prefer})
    assert one.severity is Severity.WARNING
    assert one.message.startswith("only cpu-3 takes pods without tolerations")
    assert one.fix.startswith("join 1 more node(s)")


def test_an_untainted_gpu_host_does_not_count_as_a_platform_node(api: tuple[FakeApi, Path]) -> None:
    """A GPU host lacking its taint is an error of its own (the taint check); it is not counted as room for the
    platform's pods, which it would lose once tainted."""
    fake, kubeconfig = api
    spec = metal(kubeconfig)
    first, *rest = hosts(spec)
    fake.nodes = {h: node(h, [TAINT]) for h in rest} | {first: node(first, [])} | cpu_nodes("cpu-1")
    fake.daemonsets = [daemonset("kube-system", "cilium")]
    findings = check_existing_cluster(spec)
    (platform,) = [f for f in findings if f.subject.startswith("platform nodes")]
    assert platform.severity is Severity.WARNING and "only cpu-1" in platform.message


def test_an_untainted_or_missing_host_is_an_error(api: tuple[FakeApi, Path]) -> None:
    fake, kubeconfig = api
    spec = metal(kubeconfig)
    first, second, *rest = hosts(spec)
    fake.nodes = {h: node(h, [TAINT]) for h in rest} | cpu_nodes("cpu-1", "cpu-2")
    fake.nodes[first] = node(
        first, [{"key": "nvidia.com/gpu", "value": "true", "effect": "PreferNoSchedule"}]
    )
    fake.daemonsets = [daemonset("kube-system", "cilium")]
    bad = [f for f in check_existing_cluster(spec) if f.is_error]
    assert [f.subject for f in bad] == [
        f"gpufleet:nodePools[0].hosts ({first})",
        f"gpufleet:nodePools[0].hosts ({second})",
    ]
    assert (
        bad[0].fix
        == f"kubectl taint node {first} nvidia.com/gpu=true:NoSchedule (or register the kubelet with it)"
    )
    assert "is not in the cluster" in bad[1].message


@pytest.mark.parametrize(
    ("daemonsets", "enforced"),
    [
        ([daemonset("kube-system", "kube-flannel-ds")], False),
        ([daemonset("kube-system", "aws-node")], False),  # VPC CNI without its policy agent
        (
            [
                daemonset(
                    "kube-system",
                    "aws-node",
                    [
                        {"name": "aws-node", "image": "a"},
                        {
                            "name": "aws-network-policy-agent",
                            "image": "b",
                            "args": ["--enable-network-policy=true"],
                        },
                    ],
                )
            ],
            True,
        ),
        ([daemonset("kube-system", "antrea-agent")], True),
    ],
)
def test_network_policy_enforcement(api: tuple[FakeApi, Path], daemonsets: list[dict[str, Any]], enforced: bool) -> None:  # fmt: skip
    fake, kubeconfig = api
    spec = metal(kubeconfig)
    fake.nodes = {h: node(h, [TAINT]) for h in hosts(spec)} | cpu_nodes("cpu-1", "cpu-2")
    fake.daemonsets = daemonsets
    finding = check_existing_cluster(spec)[-1]
    assert finding.subject == "network policies"
    assert (finding.severity is Severity.OK) is enforced
    if not enforced:
        assert finding.severity is Severity.WARNING


def test_an_unreadable_cluster_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """Nothing of the cluster could be checked, so preflight must not pass."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    (finding,) = check_existing_cluster(metal(kubeconfig))
    assert finding.severity is Severity.ERROR and "not checked" in finding.message


@pytest.mark.parametrize(("chart", "ok"), [("9.59.0", True), ("9.57.0", True), ("9.56.0", False)])
def test_autoscaler_chart_rbac_for_provisioning_requests(chart: str, ok: bool) -> None:
    """kubernetes/autoscaler charts/cluster-autoscaler/templates/clusterrole.yaml: `provisioningrequests`,
    `provisioningrequests/status` and `podtemplates` rules first appear at tag cluster-autoscaler-chart-9.57.0
    (absent at 9.56.0); Kueue's provisioning admission check creates PodTemplates and ProvisioningRequests
    that the autoscaler must read and update."""
    prod = load_example("example-prod")
    spec = prod.model_copy(update={
        "scheduling": prod.scheduling.model_copy(update={"provisioning_requests": True}),
        "versions": prod.versions.model_copy(update={"cluster_autoscaler_chart": chart}),
    })  # fmt: skip
    (finding,) = check_provisioning_rbac(spec)
    assert (finding.severity is Severity.OK) is ok
    off = prod.model_copy(
        update={"scheduling": prod.scheduling.model_copy(update={"provisioning_requests": False})}
    )
    assert check_provisioning_rbac(off) == []  # provisioningRequests off: nothing to check
