"""`invoke render` for Karpenter: every EC2NodeClass, NodePool and the do-not-disrupt policy as YAML for GitOps.

Written to `<manifests>/karpenter/`, one file per object named `<rank>-<kind>-<name>.yaml` (node classes before
the node pools that refer to them), plus a kustomization listing them in apply order. Files this module wrote
before are replaced, so a pool removed from the spec disappears from Git too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from infra.aws.karpenter.disruption import do_not_disrupt_policy
from infra.aws.karpenter.pools import karpenter_objects
from infra.spec import ClusterSpec
from scheduler.manifests import KUSTOMIZATION, dump

SUBDIR = "karpenter"
RANK = {
    "EC2NodeClass": 1,
    "NodePool": 2,
    "MutatingAdmissionPolicy": 3,
    "MutatingAdmissionPolicyBinding": 4,
}
RENDERED = re.compile(r"^\d{2}-[a-z]+-.+\.yaml$")


def manifests(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Everything Karpenter-specific the cluster applies, in apply order."""
    return [*karpenter_objects(spec), *do_not_disrupt_policy(spec)]


def file_name(obj: dict[str, Any]) -> str:
    return f"{RANK[obj['kind']]:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def render_karpenter(spec: ClusterSpec, manifests_dir: str | Path) -> list[Path]:
    out = Path(manifests_dir) / SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.yaml"):
        if RENDERED.match(stale.name):
            stale.unlink()
    objects = manifests(spec)
    names = [file_name(o) for o in objects]
    written = []
    for name, obj in zip(names, objects, strict=True):
        (out / name).write_text(dump(obj))
        written.append(out / name)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": names,
    }
    (out / KUSTOMIZATION).write_text(dump(kustomization))
    return [*written, out / KUSTOMIZATION]
