"""The small stack the real-daemon tests run: Pulumi.metal-slurm.yaml's pools and teams, scaled to one machine
(two H100 hosts of two GPUs, one time-sliced L40S host) and every host mapped to loopback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from tests.preflight.helpers import stack_doc, write_stack

H100_HOSTS = ["gpu-h100-01", "gpu-h100-02"]
L40S_HOSTS = ["gpu-l40s-01"]
STACK_NAME = "slurm-daemons"


def daemon_stack_file(tmp: Path) -> Path:
    """Where `daemon_stack(tmp)` writes its stack file (for `invoke ... --stack PATH`)."""
    return tmp / f"Pulumi.{STACK_NAME}.yaml"


def daemon_stack(tmp: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> ClusterSpec:
    """The small stack; `edit` changes its `config` further before it is written and loaded."""
    doc: dict[str, Any] = stack_doc("metal-slurm")
    config = doc["config"]
    # slurmctld runs where SlurmctldHost names it: `localhost` matches any machine
    config["gpufleet:slurm"].update(controllerHosts=["localhost"], accountingHost="localhost")
    h100, l40s = config["gpufleet:nodePools"]
    h100.update(hosts=H100_HOSTS, gpusPerNode=2, cpusPerNode=2, memoryGiBPerNode=1)
    l40s.update(hosts=L40S_HOSTS, gpusPerNode=1, cpusPerNode=2, memoryGiBPerNode=1)
    vision, nlp = config["gpufleet:teams"]
    vision.update(quotas={"h100": 2, "l40s": 1}, borrowingLimit=2)
    nlp.update(quotas={"h100": 2}, borrowingLimit=2)
    if edit:
        edit(config)
    return load_stack(write_stack(tmp, STACK_NAME, doc))
