"""`invoke twin --monitoring`: the stack's metrics chain on real components, scraped as it is scraped in a cluster.

What runs, built from their Go modules at the versions kube-prometheus-stack 88.5.3 deploys (`infra.versions`):
the **Prometheus operator**, which turns the stack's ServiceMonitors and PrometheusRules (and those the GPU
operator and the charts create) into Prometheus' real scrape configuration; **Prometheus** 3.x and
**Alertmanager**, run with the arguments, configuration and rule files the operator generates for their
StatefulSets; **kube-state-metrics** with the arguments its chart gives it, reporting the twin's real objects;
the stack's two **Kueue** replicas, each serving its real `/metrics` (`twin.cluster`); and the
**dcgm-exporter** stand-in (`twin.dcgm`) behind the Service and ServiceMonitor the GPU operator deploys.

How a scrape reaches a process without leaving the twin: Prometheus discovers targets through the API server
(Endpoints of Services, as in a cluster), so it dials pod IPs. kwok hands pods addresses in 10.244.0.0/16; the
twin routes that whole range to its own `lo` (`ip addr add 10.244.0.0/16 dev lo`, inside its network
namespace only) and each process listens on the IP of the pod it stands for. Nothing is pre-labelled: every
label on a series comes from the operator's relabelling, the exporter's own rules or Kueue.

Processes that run "in a pod" (Prometheus, Alertmanager) get a mount namespace of their own with the pod's
ServiceAccount token at the fixed in-cluster path (/var/run/secrets/kubernetes.io/serviceaccount, read by
client-go's InClusterConfig and by `bearerTokenFile` endpoints) and the operator's generated files at the
paths its StatefulSet mounts them (/etc is the twin's private overlay). A reloader thread does what the
operator's config-reloader sidecar does: it writes the generated configuration and rule files when their
Secrets and ConfigMaps change and asks the process to reload (`POST /-/reload`).

The objects the charts would create (the Prometheus and Alertmanager resources, kube-state-metrics' Deployment,
the dcgm-exporter operand) are modelled, with their upstream templates cited, in `twin.monitoring_objects`;
this module applies them and runs the programs behind them. Simplifications, stated: the operator
and kube-state-metrics use the twin's admin credentials (their charts' ClusterRoles are read-mostly
supersets of nothing gpufleet tests), Alertmanager runs as one replica without clustering, and the
Prometheus operator's admission webhook is not run (the API server validates the CRDs' schemas).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import re
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.gpu_stack.gpu_operator import dcgm_exporter_values
from infra.monitoring.exporter import deployment_of
from infra.spec import ClusterSpec
from scheduler.labels import GPU_OPERATOR_NAMESPACE
from twin import dcgm
from twin.kubectl import Kubectl
from twin.monitoring_objects import (
    EXPORTER,
    KSM_PORT,
    alertmanager_objects,
    dcgm_exporter_objects,
    fullname,
    ksm_args,
    ksm_custom_resource_state,
    ksm_objects,
    prometheus_objects,
)
from twin.processes import Process, Supervisor, free_port, http_ok, wait_until
from twin.toolchain.build import Toolchain

POD_NETWORK = "10.244.0.0/16"  # kwok's --cidr (twin.kwok)
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
Say = Callable[[str], None]


def pod_network_on_loopback() -> None:
    """Route kwok's pod range to this namespace's `lo`, so a process can listen on the IP of the pod it stands
    for and Prometheus reaches it where the API server says the pod is."""
    done = subprocess.run(["ip", "addr", "add", POD_NETWORK, "dev", "lo"], capture_output=True, text=True,
                          check=False)  # fmt: skip
    if done.returncode != 0 and "already assigned" not in done.stderr and "File exists" not in done.stderr:
        raise RuntimeError(f"could not route {POD_NETWORK} to lo: {done.stderr.strip()}")


# ---- pods as processes -------------------------------------------------------------------------------------


def in_pod(argv: list[str], token_dir: Path) -> list[str]:
    """`argv` in a mount namespace of its own with the pod's ServiceAccount files at the in-cluster path."""
    script = 'set -e; mount -t tmpfs tmpfs /run; mkdir -p "$SA"; cp "$0"/* "$SA"/; exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, str(token_dir), *argv]


def _expand(text: str, pod: dict[str, Any]) -> str:
    """The config-reloader's `$(VAR)` expansion of the pod's environment (POD_NAME, SHARD, POD_IP)."""
    values = {"POD_NAME": pod["metadata"]["name"], "SHARD": "0", "POD_IP": pod["status"].get("podIP", "")}
    return re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), m.group(0)), text)


def _data(obj: dict[str, Any]) -> dict[str, bytes]:
    if obj.get("kind") == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    return {k: v.encode() for k, v in (obj.get("data") or {}).items()}


@dataclass
class PodProcess:
    """One StatefulSet pod the operator created, run as the real program with its generated files."""

    name: str  # prometheus, alertmanager
    pod: dict[str, Any]
    statefulset: dict[str, Any]
    folder: Path
    port: int
    config_secret: str  # the operator's generated config Secret
    config_key: str  # its gzipped key
    config_out: Path  # where the reloader writes it (the emptyDir the container reads)
    process: Process | None = None
    written: dict[Path, dict[str, bytes]] = field(default_factory=dict)  # what the last sync wrote

    @property
    def ip(self) -> str:
        return str(self.pod["status"]["podIP"])

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    def container(self) -> dict[str, Any]:
        return next(
            c for c in self.statefulset["spec"]["template"]["spec"]["containers"] if c["name"] == self.name
        )

    def mounted(self, kubectl: Kubectl) -> dict[Path, dict[str, bytes]]:
        """Every Secret/ConfigMap volume of the pod, by mount path (projected volumes flattened)."""
        namespace = self.statefulset["metadata"]["namespace"]
        volumes = {v["name"]: v for v in self.statefulset["spec"]["template"]["spec"].get("volumes", [])}
        out: dict[Path, dict[str, bytes]] = {}
        spec = self.statefulset["spec"]["template"]["spec"]
        # every container's mounts: the config Secret is mounted into the config-reloader, not the server
        mounts = [
            m for c in spec.get("initContainers", []) + spec["containers"] for m in c.get("volumeMounts", [])
        ]
        for mount in mounts:
            volume = volumes.get(mount["name"], {})
            sources: list[tuple[str, str]] = []
            if "secret" in volume:
                sources.append(("secret", volume["secret"]["secretName"]))
            if "configMap" in volume:
                sources.append(("configmap", volume["configMap"]["name"]))
            for projected in volume.get("projected", {}).get("sources", []):
                if "secret" in projected:
                    sources.append(("secret", projected["secret"]["name"]))
                if "configMap" in projected:
                    sources.append(("configmap", projected["configMap"]["name"]))
            files: dict[str, bytes] = {}
            for kind, name in sources:
                found = json.loads(
                    kubectl.run("get", kind, name, "-n", namespace, "-o", "json", check=False) or "{}"
                )
                files.update(_data(found))
            if sources:
                out[Path(mount["mountPath"])] = files
        return out

    def sync(self, kubectl: Kubectl) -> bool:
        """Write the generated files; True when they changed (the config-reloader's job)."""
        mounted = self.mounted(kubectl)
        if mounted == self.written:
            return False
        for path, files in mounted.items():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                (path / name).write_bytes(content)
                if name == self.config_key:
                    self.config_out.parent.mkdir(parents=True, exist_ok=True)
                    self.config_out.write_text(_expand(gzip.decompress(content).decode(), self.pod))
        self.written = mounted
        return True

    def argv(self, binary: Path) -> list[str]:
        """The container's own arguments, with the listen address on the pod's IP, data in the twin's folder,
        and (Alertmanager) no cluster peers."""
        data = self.folder / f"{self.name}-data"
        data.mkdir(parents=True, exist_ok=True)
        out = [str(binary)]
        for arg in self.container().get("args", []):
            flag = arg.split("=", 1)[0]
            if flag in ("--web.listen-address", "--cluster.peer", "--cluster.listen-address",
                        "--cluster.advertise-address", "--web.config.file"):  # fmt: skip
                continue
            if flag in ("--storage.tsdb.path", "--storage.path"):
                arg = f"{flag}={data}"
            out.append(_expand(arg, self.pod))
        out.append(f"--web.listen-address={self.ip}:{self.port}")
        if self.name == "alertmanager":
            out.append("--cluster.listen-address=")
        return out


@dataclass
class MonitoringChain:
    spec: ClusterSpec
    tools: Toolchain
    kubectl: Kubectl
    sup: Supervisor
    folder: Path
    server: str
    ca: Path
    admin_cert: tuple[Path, Path]
    say: Say = print
    pods: dict[str, PodProcess] = field(default_factory=dict)
    exporters: dict[str, dcgm.ExporterServer] = field(default_factory=dict)
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)

    # ---- up ----------------------------------------------------------------------------------------------

    def up(self) -> MonitoringChain:
        pod_network_on_loopback()
        self.kubectl.apply(dcgm_exporter_objects(self.spec))
        self.kubectl.apply(
            ksm_objects(self.spec) + prometheus_objects(self.spec) + alertmanager_objects(self.spec)
        )
        self._loop("volume provisioner", self._provision_volumes, 2.0)
        self._operator()
        self._kube_state_metrics()
        self._loop("dcgm-exporters", self._reconcile_exporters, 1.0)
        for name, port in (("alertmanager", 9093), ("prometheus", 9090)):
            self._pod_process(name, port)
        self._loop("config-reloader", self._reload, 2.0)
        return self

    def _loop(self, name: str, step: Callable[[], None], every: float) -> None:
        def run() -> None:
            while not self.stop_event.wait(every):
                with contextlib.suppress(Exception):
                    step()

        step()
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _operator(self) -> None:
        cert, key = self.admin_cert
        port = free_port()
        proc = self.sup.start(
            "prometheus-operator",
            [self.tools["prometheus-operator"], f"--apiserver={self.server}", f"--ca-file={self.ca}",
             f"--cert-file={cert}", f"--key-file={key}", f"--web.listen-address=127.0.0.1:{port}",
             "--kubelet-service=", "--log-level=info",
             "--prometheus-config-reloader=quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1"],
        )  # fmt: skip
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), "the Prometheus operator", proc, 60)

    def _pod_ip(self, namespace: str, selector: str, what: str) -> dict[str, Any]:
        """The first live pod of `selector` once kwok has given it an IP."""
        found: list[dict[str, Any]] = []

        def find() -> bool:
            out = self.kubectl.run("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
            found[:] = [p for p in json.loads(out)["items"]
                        if p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
            return bool(found)

        wait_until(find, what, None, 120)
        return found[0]

    def _kube_state_metrics(self) -> None:
        ns = self.spec.cluster.monitoring.namespace
        pod = self._pod_ip(ns, "app.kubernetes.io/name=kube-state-metrics", "kube-state-metrics' pod")
        config = ksm_custom_resource_state(self.spec)
        path = None
        if config is not None:
            path = self.folder / "ksm-custom-resource-state.yaml"
            path.write_text(json.dumps(config))
        ip = pod["status"]["podIP"]
        argv: list[str | Path] = [self.tools["kube-state-metrics"], f"--kubeconfig={self.kubectl.kubeconfig}",
                *ksm_args(self.spec, path), f"--host={ip}", "--telemetry-host=127.0.0.1",
                f"--telemetry-port={free_port()}"]  # fmt: skip
        proc = self.sup.start("kube-state-metrics", argv)
        wait_until(lambda: http_ok(f"http://{ip}:{KSM_PORT}/healthz"), "kube-state-metrics", proc, 60)

    def _snapshot(self) -> None:
        """What the exporters read, refreshed once a second (one list per kind, not one per scrape)."""
        values = dcgm_exporter_values(self.spec)
        config_name = values.get("config", {}).get("name", EXPORTER)
        nodes = json.loads(self.kubectl.run("get", "nodes", "-o", "json"))["items"]
        pods = json.loads(self.kubectl.run("get", "pods", "-A", "-o", "json"))["items"]
        cm = self.kubectl.get("configmap", config_name, GPU_OPERATOR_NAMESPACE)
        ds = self.kubectl.get("daemonset", EXPORTER, GPU_OPERATOR_NAMESPACE)
        container = ds["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        exporters = [p for p in pods if p["metadata"]["namespace"] == GPU_OPERATOR_NAMESPACE
                     and p["metadata"].get("labels", {}).get("app") == EXPORTER]  # fmt: skip
        self.state = {
            "nodes": {n["metadata"]["name"]: n for n in nodes},
            "pods": pods,
            "exporter_nodes": {
                p["status"]["podIP"]: p["spec"]["nodeName"]
                for p in exporters
                if p.get("status", {}).get("podIP")
                and p["spec"].get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
            },
            "counters": dcgm.parse_counters(cm.get("data", {}).get("dcgm-metrics.csv", "")),
            "shape": dcgm.Shape(env, deployment_of(ds)),
        }

    def _provision_volumes(self) -> None:
        """The storage provisioner's part: a PersistentVolume of the requested size and class for every claim
        still unbound (the PV controller then binds them), so a StatefulSet with a volumeClaimTemplate (the
        stack's Prometheus storage) schedules as it does on a cluster with a CSI provisioner."""
        claims = json.loads(self.kubectl.run("get", "pvc", "-A", "-o", "json"))["items"]
        volumes = []
        for c in claims:
            if c["spec"].get("volumeName") or c.get("status", {}).get("phase") == "Bound":
                continue
            meta = c["metadata"]
            volumes.append({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": f"twin-{meta['uid']}"},
                "spec": {"capacity": {"storage": c["spec"]["resources"]["requests"]["storage"]},
                         "accessModes": c["spec"].get("accessModes", ["ReadWriteOnce"]),
                         "storageClassName": c["spec"].get("storageClassName") or "",
                         "persistentVolumeReclaimPolicy": "Delete",
                         "hostPath": {"path": str(self.folder / "volumes" / meta["uid"])},
                         "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}},
            })  # fmt: skip
        if volumes:
            self.kubectl.apply(volumes)

    def _reconcile_exporters(self) -> None:
        """One stand-in endpoint per exporter pod IP; gone pods' endpoints close."""
        self._snapshot()
        live = self.state["exporter_nodes"]
        for ip in [ip for ip in self.exporters if ip not in live]:
            self.exporters.pop(ip).stop()
        for ip in live:
            if ip not in self.exporters:
                self.exporters[ip] = dcgm.ExporterServer(ip, self._fetcher(ip)).start()

    def _fetcher(self, ip: str) -> dcgm.Fetch:
        """The node is looked up at each scrape from the exporter pod that holds `ip` then: kwok hands a freed
        pod IP to the next pod, on any node, and a DaemonSet rollout can move an address from one node's
        exporter to another's between two reconciles, so an endpoint must not remember its first node."""

        def fetch() -> tuple[dict[str, Any], list[dict[str, Any]], list[dcgm.Counter], dcgm.Shape]:
            state = self.state
            node = state["exporter_nodes"].get(ip)
            if node is None:
                raise LookupError(f"no exporter pod holds {ip}")
            pods = [p for p in state["pods"] if p["spec"].get("nodeName") == node]
            return state["nodes"][node], pods, state["counters"], state["shape"]

        return fetch

    def _pod_process(self, name: str, port: int) -> None:
        ns = self.spec.cluster.monitoring.namespace
        full = fullname(self.spec)
        cr = f"{full}-{name}"
        sts_name = f"{name}-{cr}"

        def statefulset() -> bool:
            return bool(
                self.kubectl.run("get", "statefulset", sts_name, "-n", ns, "--ignore-not-found", "-o", "name")
            )

        wait_until(statefulset, f"the operator's {name} StatefulSet", None, 120)
        sts = self.kubectl.get("statefulset", sts_name, ns)
        selector = ",".join(f"{k}={v}" for k, v in sts["spec"]["selector"]["matchLabels"].items())
        pod = self._pod_ip(ns, selector, f"{name}'s pod")
        if name == "prometheus":
            secret, key, out = (
                f"prometheus-{cr}",
                "prometheus.yaml.gz",
                "/etc/prometheus/config_out/prometheus.env.yaml",
            )
        else:
            secret, key, out = (
                f"alertmanager-{cr}-generated",
                "alertmanager.yaml.gz",
                "/etc/alertmanager/config_out/alertmanager.env.yaml",
            )
        proc = PodProcess(name, pod, sts, self.folder, port, secret, key, Path(out))
        wait_until(lambda: bool(self.kubectl.run("get", "secret", secret, "-n", ns, "--ignore-not-found", "-o", "name")),
                   f"the operator's {name} configuration", None, 120)  # fmt: skip
        proc.sync(self.kubectl)
        account = sts["spec"]["template"]["spec"].get("serviceAccountName", "default")
        token_dir = self.folder / f"{name}-serviceaccount"
        token_dir.mkdir(parents=True, exist_ok=True)
        (token_dir / "token").write_text(self.kubectl.token(account, ns))
        (token_dir / "ca.crt").write_bytes(self.ca.read_bytes())
        (token_dir / "namespace").write_text(ns)
        host, api_port = self.server.removeprefix("https://").rsplit(":", 1)
        env = {"SA": SA_DIR, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": api_port}
        binary = self.tools[name]
        proc.process = self.sup.start(name, in_pod(proc.argv(binary), token_dir), env=env)
        wait_until(lambda: http_ok(f"{proc.url}/-/ready"), f"{name} ready", proc.process, 90)
        self.pods[name] = proc

    def _reload(self) -> None:
        for proc in self.pods.values():
            if proc.sync(self.kubectl):
                request = urllib.request.Request(f"{proc.url}/-/reload", method="POST")
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(request, timeout=10).close()

    # ---- down ----------------------------------------------------------------------------------------------

    def down(self) -> None:
        self.stop_event.set()
        for server in self.exporters.values():
            with contextlib.suppress(Exception):
                server.stop()
        self.exporters.clear()


__all__ = [
    "MonitoringChain",
    "PodProcess",
    "in_pod",
    "pod_network_on_loopback",
]
