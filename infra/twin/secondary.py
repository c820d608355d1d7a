"""The stack's own `gpu-binpack` scheduler (and the extender) as processes next to the twin's API server.

On the real cluster they run as the Deployments the policy deploys; on the twin those Deployments' pods run
on kwok nodes and do nothing, and the same programs run here instead, each as its own ServiceAccount (a
TokenRequest token), so the project's RBAC for them is what they have:

- kube-scheduler of the twin's minor with the configuration the stack deployed, read back from its ConfigMap
  (`gpu-binpack-config`), with two changes a process outside the cluster needs: `clientConnection.kubeconfig`
  (kube-scheduler ignores `--kubeconfig` once `--config` is given, kubernetes/kubernetes#98211) and, for
  FragmentationAware, the extender's `urlPrefix` pointed at its loopback port instead of the Service name;
- the extender (`python -m scheduler.extender`), with the kubeconfig of its ServiceAccount.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from infra.twin.controlplane import ControlPlane, kubeconfig, write_kubeconfig
from infra.twin.kubectl import Kubectl
from infra.twin.processes import Process, Supervisor, free_port, http_ok, https_ok, wait_until
from infra.twin.toolchain import Toolchain
from scheduler.extender.manifests import NAME as EXTENDER
from scheduler.labels import SCHEDULER_NAMESPACE, SECONDARY_SCHEDULER_NAME
from scheduler.placement import CONFIG_FILE

HEALTH_PATHS = "/healthz,/readyz,/livez,/metrics"


def _service_account_kubeconfig(plane: ControlPlane, kubectl: Kubectl, folder: Path, account: str) -> Path:
    token = kubectl.token(account, SCHEDULER_NAMESPACE)
    return write_kubeconfig(
        folder / f"{account}.kubeconfig", kubeconfig(plane.server, plane.ca.cert_path, account, token=token)
    )


def start_extender(
    plane: ControlPlane, kubectl: Kubectl, sup: Supervisor, folder: Path
) -> tuple[Process, int]:
    port = free_port()
    config = _service_account_kubeconfig(plane, kubectl, folder, EXTENDER)
    proc = sup.start(
        "extender",
        [sys.executable, "-m", "scheduler.extender", "--port", str(port), "--host", "127.0.0.1"],
        env={"KUBECONFIG": str(config)},
    )
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), "the extender /readyz", proc, 60)
    return proc, port


def scheduler_configuration(
    deployed: str, kubeconfig_path: Path, extender_port: int | None
) -> dict[str, object]:
    """The deployed KubeSchedulerConfiguration, with the client connection and extender URL of a local run."""
    config = dict(yaml.safe_load(deployed))
    config["clientConnection"] = {"kubeconfig": str(kubeconfig_path)}
    if extender_port is not None:
        config["extenders"] = [
            {**e, "urlPrefix": f"http://127.0.0.1:{extender_port}"} for e in config.get("extenders", [])
        ]
    return config


def start_secondary_scheduler(
    tools: Toolchain, plane: ControlPlane, kubectl: Kubectl, sup: Supervisor, folder: Path,
    extender_port: int | None = None,
) -> Process:  # fmt: skip
    deployed = kubectl.get("configmap", f"{SECONDARY_SCHEDULER_NAME}-config", SCHEDULER_NAMESPACE)
    account = _service_account_kubeconfig(plane, kubectl, folder, SECONDARY_SCHEDULER_NAME)
    config = scheduler_configuration(deployed["data"][CONFIG_FILE], account, extender_port)
    path = folder / f"{SECONDARY_SCHEDULER_NAME}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    proc = sup.start(
        SECONDARY_SCHEDULER_NAME,
        [
            tools["kube-scheduler"],
            f"--config={path}",
            f"--authentication-kubeconfig={account}",
            f"--authorization-kubeconfig={account}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authorization-always-allow-paths={HEALTH_PATHS}",
            "--v=2",
        ],
    )
    wait_until(lambda: https_ok(f"https://127.0.0.1:{port}/healthz", None), f"{SECONDARY_SCHEDULER_NAME} /healthz",
               proc, 60)  # fmt: skip
    return proc
