"""Node user data for GPU launch templates: what a GPU node changes on itself at first boot.

EKS merges a launch template's user data with its own bootstrap; on AL2023 both are parts of one MIME
multi-part document (EKS User Guide, "Customize managed nodes with launch templates": AL2023 user data is
MIME multi-part, `nodeadm` reads its `NodeConfig` parts and cloud-init runs the shell-script parts). So the
document built here holds only a shell script; the cluster settings come from EKS's own NodeConfig part.

On AL2023 NVIDIA nodes the NVIDIA container toolkit is preinstalled and, by default, lets an unprivileged
container select GPUs through the `NVIDIA_VISIBLE_DEVICES` environment variable
(`accept-nvidia-visible-devices-envvar-when-unprivileged`, default true in
nvidia-container-toolkit v1.20.0 api/config/v1/config.go). A pod that sets `NVIDIA_VISIBLE_DEVICES=all`
and tolerates the GPU taint would then see every GPU of the node without requesting one, so the script turns
it off in the toolkit's config file (`/etc/nvidia-container-runtime/config.toml`) with the toolkit's own
`nvidia-ctk config --in-place --set` command (cmd/nvidia-ctk/config). The device plugin hands GPUs to pods
through volume mounts or CDI instead, which this setting does not affect.

Bottlerocket takes TOML settings, not scripts, and is left alone here: its container toolkit is configured
by the OS (docs/aws.md, "Known limits").

These are pure public functions: the managed node groups and the Karpenter node classes use the same ones.
"""

from __future__ import annotations

import base64
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
ENVVAR_SETTING = "accept-nvidia-visible-devices-envvar-when-unprivileged"
BOUNDARY = "==GPUFLEET=="


def gpu_node_script() -> str:
    """The first-boot script of an AL2023 NVIDIA node (idempotent: every line can run again)."""
    return "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            "# No GPU through NVIDIA_VISIBLE_DEVICES for unprivileged containers (GPUs come from the device plugin).",
            f"nvidia-ctk config --in-place --config {TOOLKIT_CONFIG} --set {ENVVAR_SETTING}=false",
            "",
        ]
    )


def mime_user_data(script: str) -> str:
    """A MIME multi-part document with one shell-script part, the form EKS merges for AL2023 nodes."""
    doc = MIMEMultipart(boundary=BOUNDARY)
    doc.attach(MIMEText(script, "x-shellscript"))
    return doc.as_string()


def node_user_data(ami_family: str) -> str | None:
    """Base64 user data for a launch template of this AMI family, or None when the family needs none."""
    if ami_family != "AL2023_NVIDIA":
        return None
    return base64.b64encode(mime_user_data(gpu_node_script()).encode()).decode()
