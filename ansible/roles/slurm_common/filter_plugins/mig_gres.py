"""A MIG host's gres.conf lines from what nvidia-smi and the driver report, where no NVML plugin does it.

slurmd binds a MIG instance to a job through the instance's device files: the parent GPU's `/dev/nvidiaN` and
the two capability files of its GPU instance and compute instance, `/dev/nvidia-caps/nvidia-capM`, whose minors
the driver lists in `/proc/driver/nvidia-caps/mig-minors` (`gpu<N>/gi<G>/access M`,
`gpu<N>/gi<G>/ci<C>/access M`). Slurm's NVML plugin builds exactly these three files per instance
(SchedMD/slurm@slurm-22-05-8-1 src/plugins/gpu/nvml/gpu_nvml.c, `_get_mig_minors` and `_handle_mig`); without
it gres.conf names them with `MultipleFiles` (gres.conf(5), new in 22.05: "Graphics cards using Multi-Instance
GPU (MIG) technology will present multiple device files that should be managed as a single generic resource").

The instances come from `nvidia-smi mig -lci` (GPU index, GPU instance ID, profile, compute instance ID: the
table of NVIDIA's MIG user guide, "Creating GPU Instances"), and each GPU index's device minor from
`nvidia-smi -q` ("Minor Number"), since mig-minors and `/dev/nvidiaN` count minors, not indexes.

Kept free of Ansible imports (apart from the FilterModule hook) so tests call the functions directly.
"""

from __future__ import annotations

import re
from typing import Any

# |   0      7       MIG 1g.10gb          19        0          6:1     |
_CI_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+\d+:\d+\s*\|\s*$")
_GI_MINOR = re.compile(r"^gpu(\d+)/gi(\d+)/access\s+(\d+)\s*$")
_CI_MINOR = re.compile(r"^gpu(\d+)/gi(\d+)/ci(\d+)/access\s+(\d+)\s*$")
_MINOR_NUMBER = re.compile(r"^\s*Minor Number\s*:\s*(\d+)\s*$")


class MigDevicesError(ValueError):
    """What nvidia-smi or the driver reported does not describe the host's MIG instances."""


def mig_instances(lci: str) -> list[tuple[int, int, str, int]]:
    """`nvidia-smi mig -lci` -> (GPU index, GPU instance ID, profile, compute instance ID) per instance."""
    out = []
    for line in lci.splitlines():
        row = _CI_ROW.match(line)
        if row:
            gpu, gi, profile, _, ci = row.groups()
            out.append((int(gpu), int(gi), profile, int(ci)))
    return out


def gpu_minors(query: str) -> list[int]:
    """`nvidia-smi -q` -> each GPU's device minor, by GPU index (the order nvidia-smi prints them in)."""
    return [int(m.group(1)) for m in map(_MINOR_NUMBER.match, query.splitlines()) if m]


def cap_minors(mig_minors: str) -> dict[tuple[int, ...], int]:
    """/proc/driver/nvidia-caps/mig-minors -> {(gpu minor, GI): minor, (gpu minor, GI, CI): minor}."""
    out: dict[tuple[int, ...], int] = {}
    for line in mig_minors.splitlines():
        if m := _CI_MINOR.match(line):
            gpu, gi, ci, minor = map(int, m.groups())
            out[(gpu, gi, ci)] = minor
        elif m := _GI_MINOR.match(line):
            gpu, gi, minor = map(int, m.groups())
            out[(gpu, gi)] = minor
    return out


def mig_gres_lines(lci: str, query: str, mig_minors: str, node: str, profile: str) -> list[str]:
    """One gres.conf line per MIG instance of `profile` on this host, with its three device files."""
    minors = gpu_minors(query)
    caps = cap_minors(mig_minors)
    lines = []
    for gpu, gi, name, ci in sorted(mig_instances(lci)):
        if name != profile:
            continue
        if gpu >= len(minors):
            raise MigDevicesError(f"nvidia-smi -q lists no minor number for GPU {gpu}")
        minor = minors[gpu]
        if (minor, gi) not in caps or (minor, gi, ci) not in caps:
            raise MigDevicesError(
                f"/proc/driver/nvidia-caps/mig-minors has no gpu{minor}/gi{gi}/ci{ci} (GPU {gpu}, instance {gi})"
            )
        files = [
            f"/dev/nvidia{minor}",
            *(f"/dev/nvidia-caps/nvidia-cap{caps[k]}" for k in ((minor, gi), (minor, gi, ci))),
        ]
        lines.append(f"NodeName={node} Name=gpu Type={profile} MultipleFiles={','.join(files)}")
    return lines


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"mig_gres_lines": mig_gres_lines}
