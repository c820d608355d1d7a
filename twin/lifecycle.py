"""The stack's Kubernetes side on the twin, through the real Pulumi engine (Automation API, local backend).

The program is the product's own: on the existing platform `infra.program.build` (node labels, then the GPU
stack), on aws the `GpuStack` component the EKS program applies on its cluster's provider (the scheduling
component and the monitoring objects; the AWS resources themselves cannot be built here, see docs/twin.md).
What the twin runs itself is adopted, as a user adopts what an equipped cluster already runs
(`cluster.addons: {gpuOperator: existing, kueue: existing}`, a Prometheus operator's CRDs for
`monitoring.prometheus`), and NVSentinel, a chart from a registry the twin cannot reach, is left out.

The program runs inline (the Automation API serves it to the CLI over `--client`, sdk/python/lib/pulumi/
automation/_stack.py), so no language host is needed; the CLI and the Kubernetes provider are the twin's own
builds, installed into a PULUMI_HOME in the twin cache with automatic plugin downloads off.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.errors import CheckFailed
from infra.spec import ClusterSpec
from infra.versions import TWIN_PULUMI_KUBERNETES
from twin.toolchain.build import Toolchain, cache_root

PASSPHRASE = "gpufleet-twin"  # the twin's throwaway state backend; nothing secret lives there
PROJECT = "gpufleet"


PER_MINOR_VERSIONS = ("al2023_nvidia_ami_release", "bottlerocket_nvidia_release", "cluster_autoscaler_image",
                      "kube_scheduler_image")  # fmt: skip


def twin_spec(spec: ClusterSpec, kubeconfig: Path, minor: str = "") -> ClusterSpec:
    """The spec as deployed to the twin: its kubeconfig, the add-ons the twin runs adopted, and, when the twin
    runs another minor (`--minor`), that minor with its pinned images (what an upgraded cluster would run)."""
    mon = spec.cluster.monitoring
    monitoring = mon.model_copy(
        update={
            "prometheus": "existing" if mon.prometheus == "install" else mon.prometheus,
            "self_healing": "off",
        }
    )
    addons = spec.cluster.addons.model_copy(update={"gpu_operator": "existing", "kueue": "existing"})
    cluster = spec.cluster.model_copy(
        update={
            "kubeconfig": str(kubeconfig),
            "kubeconfig_context": None,
            "addons": addons,
            "monitoring": monitoring,
            "kubernetes_version": minor or spec.cluster.kubernetes_version,
        }
    )
    versions = spec.versions
    if cluster.kubernetes_version != spec.cluster.kubernetes_version:
        versions = versions.model_copy(update=dict.fromkeys(PER_MINOR_VERSIONS)).resolved(
            cluster.kubernetes_version
        )
    return spec.model_copy(update={"cluster": cluster, "versions": versions})


def program(spec: ClusterSpec) -> Callable[[], None]:
    """The Pulumi program for the twin: the product's own components, with the stack's outputs."""

    def run() -> None:
        import pulumi

        if spec.platform == "existing":
            from infra.program import build

            for key, value in build(spec).items():
                pulumi.export(key, value)
            return
        import pulumi_kubernetes as k8s

        from infra.gpu_stack.component import GpuStack

        provider = k8s.Provider("twin", kubeconfig=spec.cluster.kubeconfig)
        GpuStack(spec.cluster.name, spec, provider)
        pulumi.export("cluster_name", spec.cluster.name)

    return run


def pulumi_env(tools: Toolchain) -> dict[str, str]:
    """The environment every Pulumi call on the twin gets: the twin's CLI first on PATH, its own PULUMI_HOME
    with the twin's provider installed, no downloads, no update check."""
    home = cache_root() / "pulumi-home"
    env = {
        "PATH": f"{tools['pulumi'].parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PULUMI_HOME": str(home),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        "PULUMI_CONFIG_PASSPHRASE": os.environ.get("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE),
    }
    plugin = home / "plugins" / f"resource-kubernetes-v{TWIN_PULUMI_KUBERNETES.version}"
    if not plugin.is_dir():
        done = subprocess.run(
            [str(tools["pulumi"]), "plugin", "install", "resource", "kubernetes", TWIN_PULUMI_KUBERNETES.version,
             "--file", str(tools["pulumi-resource-kubernetes"])],
            env={**os.environ, **env}, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise CheckFailed(f"installing the twin's Kubernetes provider failed: {done.stderr.strip()}")
    return env


def stack(spec: ClusterSpec, folder: Path, tools: Toolchain) -> Any:
    """The twin's Pulumi stack (a local file backend in the twin's folder)."""
    from pulumi import automation as auto

    state = folder / "pulumi-state"
    state.mkdir(parents=True, exist_ok=True)
    env = pulumi_env(tools)
    os.environ.update({k: v for k, v in env.items() if k != "PATH"})
    os.environ["PATH"] = env["PATH"]
    work = folder / "pulumi-project"
    work.mkdir(exist_ok=True)
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(work),
        pulumi_home=env["PULUMI_HOME"],
        project_settings=auto.ProjectSettings(
            name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=f"file://{state}")
        ),
        # The engine writes the whole state after every step by default, so a crash mid-update loses nothing;
        # the twin's state lives as long as the twin, and those writes are half of its `pulumi up` (227
        # resources for metal: 10.8 s with them, 4.7 s without). The state at the end is the same.
        env_vars={**env, "PULUMI_BACKEND_URL": f"file://{state}", "PULUMI_SKIP_CHECKPOINTS": "true"},
    )
    return auto.create_or_select_stack(
        stack_name=f"twin-{spec.stack}", project_name=PROJECT, program=program(spec), opts=opts
    )


def deploy(spec: ClusterSpec, folder: Path, tools: Toolchain, say: Callable[[str], None]) -> dict[str, int]:
    """`pulumi up` of the stack's Kubernetes side on the twin; returns the change counts."""
    from pulumi import automation as auto

    target = stack(spec, folder, tools)
    lines: list[str] = []
    try:
        result = target.up(on_output=lines.append, color="never")
    except auto.CommandError as exc:
        tail = "\n".join(str(exc).splitlines()[-25:])
        raise CheckFailed(f"deploying the stack's policy to the twin failed:\n{tail}") from None
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "logs" / "pulumi-up.log").write_text("\n".join(lines))
    return dict(result.summary.resource_changes or {})
