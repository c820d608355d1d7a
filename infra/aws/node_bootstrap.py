"""Node bootstrap settings every GPU node gets, whichever autoscaler launches it (as EC2 user data).

The NVIDIA container runtime must not hand GPUs to an unprivileged container just because it sets
`NVIDIA_VISIBLE_DEVICES`: that would let any pod reach GPUs the scheduler never gave it, past Kueue's quotas
and the device plugin (NVIDIA Container Toolkit, `accept-nvidia-visible-devices-envvar-when-unprivileged`;
the device plugin's `deviceListStrategy` then passes devices as volume mounts).

- AL2023 NVIDIA: a shell part that sets the key with `nvidia-ctk config --in-place --set` before nodeadm
  starts containerd (nodeadm reads the NodeConfig parts; Karpenter appends its own NodeConfig part to a
  MIME multi-part document, Karpenter docs "spec.userData", AL2023);
- Bottlerocket NVIDIA: the API setting `settings.nvidia-container-runtime.visible-devices-envvar-when-
  unprivileged` (Bottlerocket settings reference, "nvidia-container-runtime"), set explicitly so a changed
  default cannot turn it on; Karpenter merges TOML user data with its own settings.
"""

from __future__ import annotations

TOOLKIT_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
BOUNDARY = "GPUFLEET"

AL2023_SCRIPT = f"""#!/bin/bash
set -euo pipefail
nvidia-ctk config --in-place --config /etc/nvidia-container-runtime/config.toml --set {TOOLKIT_KEY}=false
"""

BOTTLEROCKET_SETTINGS = """[settings.nvidia-container-runtime]
visible-devices-envvar-when-unprivileged = false
"""


def user_data(ami_family: str) -> str:
    """The user data of a GPU node of this AMI family (MIME multi-part on AL2023, TOML on Bottlerocket)."""
    if ami_family.startswith("BOTTLEROCKET"):
        return BOTTLEROCKET_SETTINGS
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"\n\n'
        f"--{BOUNDARY}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        f"{AL2023_SCRIPT}\n"
        f"--{BOUNDARY}--\n"
    )
