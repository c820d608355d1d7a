"""etcd, kube-apiserver, kube-controller-manager and the default kube-scheduler as local processes.

Flags follow what kwokctl's binary runtime and controller-runtime's envtest pass (kubernetes-sigs/kwok@v0.8.0
pkg/kwokctl/components/kube_*.go; controller-runtime@v0.23.3 pkg/internal/testing/controlplane/apiserver.go),
with two differences that make the twin a closer copy of a real cluster than envtest: the ServiceAccount
admission plugin stays on (the controller-manager runs its service-account and token controllers, so a
Deployment naming a missing ServiceAccount is refused as it is on EKS), and every component authenticates as
itself (system:kube-controller-manager, system:kube-scheduler) so the bootstrap RBAC is the real one.
Everything binds to 127.0.0.1 explicitly: inside a network namespace with only `lo` there is no default
interface to derive an address from. The API server's aggregator gets the front-proxy client certificate and
request-header flags kubeadm gives it (kubernetes v1.36.4 cmd/kubeadm/app/phases/controlplane/manifests.go:204-210),
from a CA of their own, so an aggregated API server (Kueue's visibility API) authenticates the users the
aggregator proxies for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from twin.pki import CertificateAuthority, KeyPair, service_account_keys
from twin.processes import Supervisor, free_port, http_ok, https_ok, wait_until
from twin.toolchain.build import Toolchain

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
HEALTH_PATHS = "/healthz,/readyz,/livez,/metrics"
# In-cluster names of the API server (its certificate carries them as a real cluster's does; never dialled).
API_DNS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local")  # fmt: skip
# The admission plugins each platform's API server runs beyond kube-apiserver's defaults (on by default:
# kubernetes v1.36.4 pkg/kubeapiserver/options/plugins.go DefaultOffAdmissionPlugins). EKS lists, for every
# platform version, NodeRestriction and ExtendedResourceToleration among its admission controllers
# (awsdocs/amazon-eks-user-guide latest/ug/clusters/platform-versions.adoc:43, the same list for 1.25-1.31);
# the second gives every pod that names an extended resource (even at 0) a toleration of the taint with that key,
# which gpufleet's GPU taint shares. kubeadm, the common way to build an existing cluster, enables
# NodeRestriction only (kubernetes v1.36.4 cmd/kubeadm/app/phases/controlplane/manifests.go:188).
ADMISSION_PLUGINS: dict[str, tuple[str, ...]] = {
    "aws": ("NodeRestriction", "ExtendedResourceToleration"),
    "existing": ("NodeRestriction",),
}
# The minor's MutatingAdmissionPolicy API is on by default from 1.36 (GA, KEP-3962); below it stays as the
# managed platforms ship it (off), because the project renders MutatingAdmissionPolicies only for >= 1.36.


def kubeconfig(
    server: str, ca: Path, user: str, cert: KeyPair | None = None, token: str = ""
) -> dict[str, Any]:
    """A kubeconfig for one user of the twin (a client certificate, or a bearer token)."""
    creds: dict[str, str] = (
        {"client-certificate": str(cert.cert), "client-key": str(cert.key)} if cert else {"token": token}
    )
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "twin", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "twin", "context": {"cluster": "twin", "user": user}}],
        "current-context": "twin",
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


@dataclass
class ControlPlane:
    """The running control plane: where it listens and the credentials its clients use."""

    folder: Path
    ca: CertificateAuthority
    api_port: int
    admin: Path  # the admin kubeconfig (system:masters)
    admin_cert: KeyPair

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"


FRONT_PROXY_CLIENT = "front-proxy-client"


def front_proxy_flags(pki: Path) -> list[str]:
    """The aggregator's client identity and the request headers an aggregated API server trusts from it (kubeadm's
    set): a front-proxy CA apart from the cluster's, as kubeadm keeps one, and its one client certificate. The
    API server publishes the CA and header names in kube-system/extension-apiserver-authentication."""
    ca = CertificateAuthority(pki / "front-proxy")
    client = ca.issue("front-proxy-client", FRONT_PROXY_CLIENT, client=True)
    return [
        f"--requestheader-client-ca-file={ca.cert_path}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={client.cert}",
        f"--proxy-client-key-file={client.key}",
    ]


def endpoint_reconciler_flags(minor: str) -> list[str]:
    """From 1.37 kube-apiserver refuses to start when its `--advertise-address` cannot be written to the
    `kubernetes` Service's Endpoints (CHANGELOG-1.37, #138102: pkg/controlplane/instance.go at v1.37.2,
    `ValidateIP`), and a loopback address cannot (pkg/apis/core/validation `ValidateEndpointIP`, which refuses it
    in any Endpoints object). The twin advertises 127.0.0.1 and never dials a Service address, so from 1.37 its
    API server runs without an endpoint reconciler (`none`: pkg/controlplane/reconcilers/none.go)."""
    major, number = (int(part) for part in minor.split(".")[:2])
    return ["--endpoint-reconciler-type=none"] if (major, number) >= (1, 37) else []


def start_control_plane(
    tools: Toolchain,
    sup: Supervisor,
    folder: Path,
    minor: str,
    api_port: int = 0,
    plugin_config: list[dict[str, Any]] | None = None,
    platform: str = "existing",
) -> ControlPlane:
    """`api_port`: the API server's port (0: any free one); the twin passes the port it forwards from.
    `plugin_config`: the default scheduler profile's pluginConfig (what a managed control plane is given).
    `platform`: whose API server admission plugins to run (ADMISSION_PLUGINS)."""
    pki = folder / "pki"
    ca = CertificateAuthority(pki)
    sa = service_account_keys(pki)
    serving = ca.issue(
        "apiserver", "kube-apiserver", ips=("127.0.0.1", "10.96.0.1"), dns=API_DNS, server=True
    )
    admin_cert = ca.issue("admin", "gpufleet-twin-admin", organizations=("system:masters",), client=True)
    kcm_cert = ca.issue("controller-manager", "system:kube-controller-manager", client=True)
    sched_cert = ca.issue("scheduler", "system:kube-scheduler", client=True)
    etcd_port, peer_port, api_port = free_port(), free_port(), api_port or free_port()
    kcm_port, sched_port = free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"

    etcd = sup.start(
        "etcd",
        [
            tools["etcd"],
            "--name=twin",
            f"--data-dir={folder / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=twin=http://127.0.0.1:{peer_port}",
            "--listen-metrics-urls=",
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=4294967296",
            "--auto-compaction-retention=1",
        ],
    )
    wait_until(lambda: http_ok(f"http://127.0.0.1:{etcd_port}/health"), "etcd /health", etcd, 30)

    api = sup.start(
        "kube-apiserver",
        [
            tools["kube-apiserver"],
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            *endpoint_reconciler_flags(minor),
            f"--secure-port={api_port}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={ca.cert_path}",
            *front_proxy_flags(pki),
            "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={sa.cert}",
            f"--service-account-signing-key-file={sa.key}",
            "--allow-privileged=true",
            "--profiling=false",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS[platform])}",
        ],
    )
    admin = write_kubeconfig(
        folder / "admin.kubeconfig", kubeconfig(server, ca.cert_path, "admin", admin_cert)
    )
    wait_until(
        lambda: https_ok(f"{server}/readyz", ca.cert_path, (admin_cert.cert, admin_cert.key)),
        "kube-apiserver /readyz",
        api,
        120,
    )

    kcm_config = write_kubeconfig(
        folder / "controller-manager.kubeconfig",
        kubeconfig(server, ca.cert_path, "system:kube-controller-manager", kcm_cert),
    )
    kcm = sup.start(
        "kube-controller-manager",
        [
            tools["kube-controller-manager"],
            f"--kubeconfig={kcm_config}",
            f"--authentication-kubeconfig={kcm_config}",
            f"--authorization-kubeconfig={kcm_config}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={kcm_port}",
            f"--authorization-always-allow-paths={HEALTH_PATHS}",
            f"--root-ca-file={ca.cert_path}",
            f"--service-account-private-key-file={sa.key}",
            "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={ca.cert_path}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--profiling=false",
            # A client rate, not a behaviour: at the default 20 qps (burst 30) the node-lifecycle controller
            # takes ~35 s to untaint a 300-node twin (about 9 nodes/s); on one machine the API server is no
            # further away than its own loopback.
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
        ],
    )
    sched_kubeconfig = write_kubeconfig(
        folder / "scheduler.kubeconfig", kubeconfig(server, ca.cert_path, "system:kube-scheduler", sched_cert)
    )
    # kube-scheduler ignores --kubeconfig when --config is given (kubernetes/kubernetes#98211): the client
    # connection goes in the configuration.
    sched_config = folder / "default-scheduler.yaml"
    sched_config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(sched_kubeconfig)},
                "leaderElection": {"leaderElect": False},
                "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": plugin_config or []}],
            }
        )
    )
    sched = sup.start(
        "kube-scheduler",
        [
            tools["kube-scheduler"],
            f"--config={sched_config}",
            f"--authentication-kubeconfig={sched_kubeconfig}",
            f"--authorization-kubeconfig={sched_kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={sched_port}",
            f"--authorization-always-allow-paths={HEALTH_PATHS}",
        ],
    )
    for proc, port in ((kcm, kcm_port), (sched, sched_port)):
        wait_until(
            lambda port=port: https_ok(f"https://127.0.0.1:{port}/healthz", None),  # type: ignore[misc]
            f"{proc.name} /healthz",
            proc,
            60,
        )
    return ControlPlane(folder, ca, api_port, admin, admin_cert)
