"""Kueue on the twin: the stack's own chart release, with the real controller running as a local process.

The twin renders the pinned Kueue chart (from the Kueue module's `charts/kueue`) with the values the stack's
Helm release uses (`scheduler.kueue_config.kueue_values`), with Helm itself (`helm template`), and applies the
result: the CRDs, the RBAC the project's roles aggregate (`kueue-batch-user-role`...), the Deployment (its
pods run on kwok nodes and do nothing: they stand for the release, with its version label), the webhook
configurations. Then it runs the real controller next to the API server with the chart's own manager
configuration, so what the stack configures is what runs. Changed for loopback, as Kueue's own integration
tests do with envtest (kueue@v0.19.2 test/integration/framework/framework.go; controller-runtime envtest
pkg/envtest/webhook.go): every webhook and CRD-conversion client config becomes `url: https://127.0.0.1:<port>/<path>`
with the twin's CA as `caBundle` (a Service would make the API server dial a ClusterIP); internal cert
management is off (it issues certificates for the Service name and patches the configurations itself,
pkg/util/cert/cert.go); the visibility API is served through the aggregator at 127.0.0.1 (`twin.kueue_visibility`);
every listener binds 127.0.0.1. Kueue runs as its own ServiceAccount (a TokenRequest token), so the chart's RBAC
is what it has. `install` is that whole sequence, the one way every twin installs Kueue: the stack's twin
(`twin.cluster`) and the replay twin's `--kueue` loop (`twin.replay_kueue`), which differ only in the values, in
whether the chart's Deployment is applied and in who starts the manager.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.versions import PER_MINOR
from scheduler.labels import KUEUE_NAMESPACE
from scheduler.yamltext import dump_text
from twin.controlplane import ControlPlane, kubeconfig, write_kubeconfig
from twin.kubectl import Kubectl
from twin.kueue_visibility import in_own_root, visibility_certificate, visibility_for_loopback
from twin.pki import CertificateAuthority
from twin.processes import Process, Supervisor, free_port, https_ok, tcp_open, wait_until
from twin.toolchain.build import Toolchain

RELEASE = "kueue"
SERVICE_ACCOUNT = "kueue-controller-manager"
WEBHOOK_SERVICE = "kueue-webhook-service"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
# Kueue reads its metrics serving certificate from this fixed path when internal cert management is off
# (kueue@v0.19.2 cmd/kueue/main.go, metricsCertPath); the twin provides it in its own mount namespace.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
VISIBILITY_CERTS = "kueue-visibility"  # in the twin's folder, copied to Kueue's /visibility
DEPLOYMENT = f"{RELEASE}-controller-manager"
MANAGER_CONTAINER = "manager"
LOCAL_FLAGS = ("config", "kubeconfig")  # what a process outside the pod is given instead


def render_chart(
    helm: Path, chart: Path, values: dict[str, Any], kube_version: str, out: Path
) -> list[dict[str, Any]]:
    """`helm template` of the pinned chart with the stack's values: what its Helm release would install."""
    values_file = out / "kueue-values.yaml"
    values_file.write_text(dump_text(values))
    argv = [str(helm), "template", RELEASE, str(chart), "--namespace", KUEUE_NAMESPACE,
            "--values", str(values_file), "--kube-version", kube_version]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"helm template of the Kueue chart failed: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _to_url(client_config: dict[str, Any], base: str, ca_bundle: str) -> dict[str, Any]:
    path = (client_config.get("service") or {}).get("path", "")
    return {"url": f"{base}{path}", "caBundle": ca_bundle}


def for_loopback(objects: list[dict[str, Any]], base: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The chart's objects with every webhook pointed at `base` (https://127.0.0.1:<port>)."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for obj in objects:
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in obj.get("webhooks", []):
                hook["clientConfig"] = _to_url(hook["clientConfig"], base, bundle)
        if obj["kind"] == "CustomResourceDefinition":
            webhook = (obj["spec"].get("conversion") or {}).get("webhook")
            if webhook:
                webhook["clientConfig"] = _to_url(webhook["clientConfig"], base, bundle)
        out.append(obj)
    return out


def manager_configuration(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The Configuration the chart ships in its ConfigMap (the stack's `manager_config`)."""
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == CONFIG_MAP:
            return dict(yaml.safe_load(obj["data"][CONFIG_KEY]))
    raise RuntimeError(f"the rendered Kueue chart has no ConfigMap {CONFIG_MAP}")


def deployment_args(objects: list[dict[str, Any]]) -> list[str]:
    """The arguments of the manager container of the chart's controller-manager Deployment: the flags the
    release runs Kueue with (the chart's `--zap-log-level`, and `--feature-gates` from
    `controllerManager.featureGates`: kueue@v0.19.2 charts/kueue/templates/manager/manager.yaml:54-57)."""
    for obj in objects:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == DEPLOYMENT:
            for container in obj["spec"]["template"]["spec"]["containers"]:
                if container["name"] == MANAGER_CONTAINER:
                    return [str(a) for a in container.get("args", [])]
    raise RuntimeError(
        f"the rendered Kueue chart has no Deployment {DEPLOYMENT} with a {MANAGER_CONTAINER} container"
    )


def local_argv(binary: Path, args: list[str], config: Path, kubeconfig: Path) -> list[str]:
    """Kueue's command line on the twin: the Deployment's `args` with `--config` pointing at the local file and
    `--kubeconfig` at the ServiceAccount's kubeconfig (a pod has its file mounted and in-cluster credentials);
    every other flag as the Deployment has it. Go's flag package takes `-f`, `--f`, `=value` or the next word."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        name = arg.lstrip("-").split("=", 1)[0]
        if arg.startswith("-") and name in LOCAL_FLAGS:
            skip_value = "=" not in arg
            continue
        kept.append(arg)
    return [str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}", *kept]


@dataclass(frozen=True)
class KueuePorts:
    webhook: int
    health: int
    metrics: int
    visibility: int


def local_configuration(config: dict[str, Any], ports: KueuePorts, cert_dir: Path) -> dict[str, Any]:
    """The chart's configuration with loopback listeners, local certificates and no cert rotation."""
    local = dict(config)
    local["health"] = {**config.get("health", {}), "healthProbeBindAddress": f"127.0.0.1:{ports.health}"}
    local["metrics"] = {**config.get("metrics", {}), "bindAddress": f"127.0.0.1:{ports.metrics}"}
    local["webhook"] = {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)}
    local["internalCertManagement"] = {"enable": False}
    local["visibilityServer"] = {"bindAddress": "127.0.0.1", "bindPort": ports.visibility}
    election = dict(config.get("leaderElection", {}))
    election["resourceNamespace"] = KUEUE_NAMESPACE  # out of cluster there is no namespace file to read
    local["leaderElection"] = election
    return local


def serving_certificates(ca: CertificateAuthority, webhook_dir: Path) -> None:
    """The webhook's serving certificate (tls.crt/tls.key in its certDir), for 127.0.0.1 and the Service name;
    the metrics server's at its fixed path; the visibility server's beside the webhook's (`VISIBILITY_CERTS`)."""
    webhook_dir.mkdir(parents=True, exist_ok=True)
    pair = ca.issue("kueue-webhook", WEBHOOK_SERVICE, ips=("127.0.0.1",),
                    dns=(f"{WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc",), server=True)  # fmt: skip
    (webhook_dir / "tls.crt").write_bytes(pair.cert.read_bytes())
    (webhook_dir / "tls.key").write_bytes(pair.key.read_bytes())
    metrics = ca.issue("kueue-metrics", "kueue-controller-manager-metrics-service", ips=("127.0.0.1",),
                       dns=(f"kueue-controller-manager-metrics-service.{KUEUE_NAMESPACE}.svc",), server=True)  # fmt: skip
    METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
    (METRICS_CERT_DIR / "tls.crt").write_bytes(metrics.cert.read_bytes())
    (METRICS_CERT_DIR / "tls.key").write_bytes(metrics.key.read_bytes())
    visibility_certificate(ca, webhook_dir.parent / VISIBILITY_CERTS)


def start_kueue(
    kueue: Path,
    args: list[str],
    config: dict[str, Any],
    kubeconfig: Path,
    sup: Supervisor,
    folder: Path,
    ports: KueuePorts,
    name: str = "kueue",
) -> Process:
    """Kueue with the Deployment's `args` (`deployment_args`) and the local `config`, in a root of its own that
    has the visibility server's certificate where Kueue reads it (`twin.kueue_visibility.in_own_root`)."""
    path = folder / f"{name}-config.yaml"
    path.write_text(dump_text(config))
    argv = local_argv(kueue, args, path, kubeconfig)
    proc = sup.start(
        name,
        in_own_root(argv, folder / f"{name}-root", folder / VISIBILITY_CERTS),
        env={"NAMESPACE": KUEUE_NAMESPACE, "POD_NAMESPACE": KUEUE_NAMESPACE},
    )
    wait_until(lambda: tcp_open(ports.webhook), f"{name}'s webhook server", proc, 90)
    wait_until(lambda: https_ok_plain(ports.health), "Kueue /readyz", proc, 90)
    return proc


def https_ok_plain(port: int) -> bool:
    """Kueue's health probes serve plain HTTP."""
    from twin.processes import http_ok

    return http_ok(f"http://127.0.0.1:{port}/readyz")


def new_ports() -> KueuePorts:
    return KueuePorts(free_port(), free_port(), free_port(), free_port())


@dataclass(frozen=True)
class KueueRelease:
    """The chart's release as applied, with what a manager is started from: its configuration and Deployment
    `args`, the ServiceAccount's kubeconfig, the ports the webhooks and the visibility APIService point at, and
    the serving certificates' folder. A caller that runs the managers its own way (the metrics chain runs every
    replica of the Deployment) starts them from this."""

    rendered: list[dict[str, Any]]
    configuration: dict[str, Any]  # the chart's manager configuration (`manager_configuration`)
    args: list[str]  # the Deployment's (`deployment_args`)
    kubeconfig: Path
    ports: KueuePorts
    cert_dir: Path


def install(
    tools: Toolchain,
    plane: ControlPlane,
    kubectl: Kubectl,
    sup: Supervisor,
    folder: Path,
    values: dict[str, Any],
    minor: str,
    *,
    deployment: bool = True,
    start: bool = True,
) -> KueueRelease:
    """Kueue's release from the chart rendered with `values` for Kubernetes `minor`, applied on loopback
    (webhooks, conversion and visibility at 127.0.0.1), CRDs first, into its namespace; its serving certificates
    and its ServiceAccount's token kubeconfig written; with `start`, one manager started and waited for until it
    serves its webhooks and is ready. Without `deployment` the chart's Deployment is not applied: its pods would
    take cores on the nodes of a twin that counts them (the replay's). The visibility API is left for the
    caller to wait for (`twin.kueue_visibility.visibility_available`): only a twin that reads it needs it."""
    rendered = render_chart(
        tools["helm"], tools.data["chart"], values, PER_MINOR[minor].kubernetes_patch, folder
    )
    ports = new_ports()
    objects = for_loopback(rendered, f"https://127.0.0.1:{ports.webhook}", plane.ca.pem)
    objects = visibility_for_loopback(objects, ports.visibility)
    if not deployment:
        objects = [o for o in objects if o["kind"] != "Deployment"]
    kubectl.run("create", "namespace", KUEUE_NAMESPACE)
    kubectl.apply_crds_first(objects)
    cert_dir = folder / "kueue-webhook"
    serving_certificates(plane.ca, cert_dir)
    token = kubectl.token(SERVICE_ACCOUNT, KUEUE_NAMESPACE)
    config = write_kubeconfig(
        folder / "kueue.kubeconfig", kubeconfig(plane.server, plane.ca.cert_path, "kueue", token=token)
    )
    release = KueueRelease(
        rendered, manager_configuration(rendered), deployment_args(rendered), config, ports, cert_dir
    )
    if start:
        local = local_configuration(release.configuration, ports, cert_dir)
        start_kueue(tools["kueue"], release.args, local, config, sup, folder, ports)
    return release


__all__ = [
    "KueuePorts",
    "KueueRelease",
    "deployment_args",
    "for_loopback",
    "https_ok",
    "install",
    "local_argv",
    "local_configuration",
    "manager_configuration",
    "new_ports",
    "render_chart",
    "serving_certificates",
    "start_kueue",
]
