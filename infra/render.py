"""`invoke render`: the stack's objects as files for review or GitOps, whichever orchestrator it runs.

On Kubernetes: the scheduling policy (one file per object plus kustomization.yaml), the monitoring side in
`monitoring/`, and under `cluster.autoscaler: karpenter` the NodePools and EC2NodeClasses in `karpenter/`. On a
Slurm stack: slurm.conf, gres.conf, cgroup.conf and sacctmgr.sh in `slurm/`. Returns the lines to show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.aws.karpenter.render import SUBDIR as KARPENTER_DIR
from infra.aws.karpenter.render import render_karpenter
from infra.errors import on_stop, writing
from infra.monitoring.render import FOLDER as MONITORING_DIR
from infra.monitoring.render import render_monitoring
from infra.pools import uses_karpenter
from infra.scheduling import scheduler_inputs
from infra.slurm.files import SUBDIR as SLURM_DIR
from infra.slurm.files import render_slurm
from infra.slurm.site import uses_slurm
from infra.spec import ClusterSpec
from scheduler import compile as compile_policy
from scheduler import kueue_values
from scheduler import render as render_objects
from scheduler.checks import warnings
from scheduler.model import PoolView, SchedulingPolicy


def render_stack(spec: ClusterSpec, folder: Path) -> list[str]:
    """Write every file of the stack under `folder`; the scheduling policy is compiled (and so checked) first,
    whatever the orchestrator, so a bad policy writes nothing."""
    policy, pools = scheduler_inputs(spec)
    objects = compile_policy(policy, pools)
    with writing(folder), on_stop(f"{folder} may hold part of the files: run the command again"):
        return _write(spec, folder, policy, pools, objects)


def _write(
    spec: ClusterSpec,
    folder: Path,
    policy: SchedulingPolicy,
    pools: list[PoolView],
    objects: list[dict[str, Any]],
) -> list[str]:
    if uses_slurm(spec):  # no Kubernetes objects: the Slurm configuration and the sacctmgr script instead
        return [f"wrote {len(render_slurm(spec, folder))} Slurm files to {folder / SLURM_DIR}"]
    paths = render_objects(objects, folder, kueue_values=kueue_values(policy))
    lines = [f"wrote {len(objects)} objects ({len(paths)} files) to {folder}"]
    if monitoring := render_monitoring(spec, folder):
        lines.append(f"wrote {len(monitoring)} monitoring file(s) to {folder / MONITORING_DIR}")
    lines += [f"warning: {warning}" for warning in warnings(pools)]
    if uses_karpenter(spec):
        written = render_karpenter(spec, folder)
        lines.append(f"wrote {len(written) - 1} Karpenter objects to {folder / KARPENTER_DIR}")
    return lines
