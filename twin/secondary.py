"""The stack's own `gpu-binpack` scheduler (and the extender) as processes next to the twin's API server.

On the real cluster they run as the Deployments the policy deploys; on the twin those Deployments' pods run
on kwok nodes and do nothing, and the same programs run here instead, each as its own ServiceAccount (a
TokenRequest token), so the project's RBAC for them is what they have:

- kube-scheduler of the twin's minor with the configuration the stack deployed, read back from its ConfigMap
  (`gpu-binpack-config`), with the one change a process outside the cluster needs: `clientConnection.kubeconfig`
  (kube-scheduler ignores `--kubeconfig` once `--config` is given, kubernetes/kubernetes#98211);
- for FragmentationAware, the extender (`python -m scheduler.extender`) with the arguments of its sidecar
  container, on the loopback port the configuration calls (the twin's namespace has it free), as the scheduler
  pod's ServiceAccount.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from scheduler.extender.manifests import CONTAINER as EXTENDER
from scheduler.labels import SCHEDULER_NAMESPACE, SECONDARY_SCHEDULER_NAME
from scheduler.placement import CONFIG_FILE
from twin.controlplane import ControlPlane, kubeconfig, write_kubeconfig
from twin.kubectl import Kubectl
from twin.processes import Process, Supervisor, free_port, http_ok, https_ok, wait_until
from twin.toolchain.build import Toolchain

HEALTH_PATHS = "/healthz,/readyz,/livez,/metrics"


def _service_account_kubeconfig(plane: ControlPlane, kubectl: Kubectl, folder: Path, account: str) -> Path:
    token = kubectl.token(account, SCHEDULER_NAMESPACE)
    return write_kubeconfig(
        folder / f"{account}.kubeconfig", kubeconfig(plane.server, plane.ca.cert_path, account, token=token)
    )


def sidecar_args(kubectl: Kubectl) -> list[str]:
    """The extender's arguments as the deployed scheduler pod's sidecar container has them."""
    deployment = kubectl.get("deployment", SECONDARY_SCHEDULER_NAME, SCHEDULER_NAMESPACE)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    (sidecar,) = [c for c in containers if c["name"] == EXTENDER]
    return [str(a) for a in sidecar.get("args", [])]


def start_extender(plane: ControlPlane, kubectl: Kubectl, sup: Supervisor, folder: Path) -> Process:
    """The extender with its sidecar's arguments; a scrape listener (``--metrics-port``) listens on loopback,
    as every twin component does, where in the pod it listens on the pod network."""
    args = sidecar_args(kubectl)
    if "--metrics-port" in args:
        args += ["--metrics-host", "127.0.0.1"]
    port = int(args[args.index("--port") + 1])
    config = _service_account_kubeconfig(plane, kubectl, folder, SECONDARY_SCHEDULER_NAME)
    command = [sys.executable, "-m", "scheduler.extender", *args]
    proc = sup.start("extender", command, env={"KUBECONFIG": str(config)})
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), "the extender /readyz", proc, 60)
    return proc


def scheduler_configuration(deployed: str, kubeconfig_path: Path) -> dict[str, object]:
    """The deployed KubeSchedulerConfiguration, with the client connection of a local run."""
    config = dict(yaml.safe_load(deployed))
    config["clientConnection"] = {"kubeconfig": str(kubeconfig_path)}
    return config


def start_secondary_scheduler(
    tools: Toolchain, plane: ControlPlane, kubectl: Kubectl, sup: Supervisor, folder: Path
) -> Process:
    deployed = kubectl.get("configmap", f"{SECONDARY_SCHEDULER_NAME}-config", SCHEDULER_NAMESPACE)
    account = _service_account_kubeconfig(plane, kubectl, folder, SECONDARY_SCHEDULER_NAME)
    config = scheduler_configuration(deployed["data"][CONFIG_FILE], account)
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
