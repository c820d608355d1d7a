"""The workloads docs/scheduling.md and docs/existing.md show, submitted as written by the team they belong to,
on the twin of the stack the docs describe: Kueue admits each one (its Workload is Admitted, with the flavor
the page says), and a Job's pods are created and bound, none refused by admission.

PyTorchJob and RayJob are admitted by the real Kueue through their integrations (the twin serves their CRDs,
twin/cluster.py); no operator runs them, so they make no pods on the twin.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.stackfile import load_stack
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.kube import Kube

SCHEDULING = ROOT / "docs" / "scheduling.md"
EXISTING = ROOT / "docs" / "existing.md"
KINDS = {"Job": "job", "PyTorchJob": "pytorchjobs.kubeflow.org", "RayJob": "rayjobs.ray.io"}


def _workloads(page: Path) -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.S)
    return [d for b in blocks for d in yaml.safe_load_all(b) if d and d.get("kind") in KINDS]


def _claims(doc: dict[str, Any]) -> bool:
    return bool(doc["spec"].get("template", {}).get("spec", {}).get("resourceClaims"))


def examples(page: Path) -> list[dict[str, Any]]:
    """The page's workloads for the stack it describes; the ones that claim GPU shares need a pool with
    `sharing: dra-shares`, which no example stack has: tests/twin/test_dra_shares.py runs them on one."""
    return [d for d in _workloads(page) if not _claims(d)]


def claim_examples(page: Path) -> list[dict[str, Any]]:
    return [d for d in _workloads(page) if _claims(d)]


def groups_of(stack: str, namespace: str) -> tuple[str, ...]:
    spec = load_stack(ROOT / f"Pulumi.{stack}.yaml")
    (team,) = [t for t in spec.teams if (t.namespace or t.name) == namespace]
    return tuple(team.groups)


def workload(kube: Kube, namespace: str, owner: str) -> dict[str, Any] | None:
    for wl in kube.items("workloads.kueue.x-k8s.io", namespace):
        if any(ref["name"] == owner for ref in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def admitted(wl: dict[str, Any] | None) -> bool:
    conditions = (wl or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)


def run_example(kube: Kube, stack: str, example: dict[str, Any]) -> dict[str, Any]:
    return run_example_as(kube, kube.as_member(groups_of(stack, example["metadata"]["namespace"])), example)


def run_example_as(kube: Kube, member: Kube, example: dict[str, Any]) -> dict[str, Any]:
    """Submit `example` as `member`; its Workload once admitted, a Job's pods bound and none refused."""
    ns, name = example["metadata"]["namespace"], example["metadata"]["name"]
    created = member.attempt("create", "-f", "-", "-o", "json", stdin=json.dumps(example))
    assert created.ok, created.err
    try:
        eventually(lambda: admitted(workload(kube, ns, name)), f"{name} to be admitted", 90)
        wl = workload(kube, ns, name)
        assert wl is not None
        if example["kind"] == "Job":
            want = example["spec"].get("parallelism", 1)

            def bound() -> list[dict[str, Any]]:
                pods = kube.items("pods", ns, f"batch.kubernetes.io/job-name={name}")
                return [p for p in pods if p["spec"].get("nodeName")]

            pods = eventually(bound, f"{name}'s pods to be bound", 90)
            assert len(pods) >= min(want, 1)
            events = json.loads(kube.ok("get", "events", "-n", ns, "-o", "json"))["items"]
            refused = [
                e["message"]
                for e in events
                if e["involvedObject"]["name"] == name and e["reason"] == "FailedCreate"
            ]
            assert not refused, refused
        return wl
    finally:
        member.delete(KINDS[example["kind"]], name, ns)
        eventually(lambda: workload(kube, ns, name) is None, f"{name}'s Workload to go", 60)


@pytest.mark.parametrize(
    "example", examples(SCHEDULING), ids=lambda e: f"{e['kind']}-{e['metadata']['name']}"
)
def test_scheduling_examples_are_admitted_and_placed(prod_twin: Kube, example: dict[str, Any]) -> None:
    wl = run_example(prod_twin, "example-prod", example)
    flavors = {f for ps in wl["status"]["admission"]["podSetAssignments"] for f in ps["flavors"].values()}
    selected = {t["spec"]["template"]["spec"].get("nodeSelector", {}).get("gpufleet.io/pool") for t in [example]
                if example["kind"] == "Job"} - {None}  # fmt: skip
    assert selected <= flavors, (selected, flavors)


def test_the_existing_platform_example_runs_on_its_pool(metal_twin: Kube) -> None:
    """docs/existing.md's Job (schedulerName gpu-binpack, nodeSelector h100) on the metal twin: admitted to the
    h100 flavor, its pod bound to an h100 host."""
    (example,) = examples(EXISTING)
    wl = run_example(metal_twin, "metal", example)
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] == "h100"
