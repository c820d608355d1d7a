"""The real Pulumi lifecycle on the existing platform: `invoke deploy / preview / destroy` against a bare twin.

The twin plays an already-equipped cluster (it runs Kueue and the GPU operator's release), so the stack adopts
both (`cluster.addons: {gpuOperator: existing, kueue: existing}`); everything else gpufleet creates for real,
through the Pulumi CLI and the Kubernetes provider the twin builds, against the twin's API server.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import start_twin, toolchain
from tests.twin.kube import Kube
from twin.lifecycle import pulumi_env

STACK = "twin-metal"
MANAGED = "app.kubernetes.io/managed-by=gpufleet"


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    twin = start_twin(tmp_path_factory, "metal", bare=True)
    yield Kube.of(twin)
    twin.stop()


def stack_file(folder: Path, kubeconfig: Path) -> Path:
    doc = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    cluster = doc["config"]["gpufleet:cluster"]
    cluster["kubeconfig"] = str(kubeconfig)
    cluster["addons"] = {"gpuOperator": "existing", "kueue": "existing"}
    # NVSentinel is a chart from a registry the twin cannot reach (and must not try to).
    cluster["monitoring"] = {"selfHealing": "off"}
    path = folder / f"Pulumi.{STACK}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def invoke(task: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", task, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env}, check=False)  # fmt: skip


def counts(stdout: str, verb: str) -> dict[str, int]:
    """The change summary the task prints last: `<verb> stack '<name>': {'create': 101}`."""
    match = re.search(rf"{verb} stack '{STACK}': (\{{.*\}})", stdout)
    assert match, stdout[-2000:]
    return dict(ast.literal_eval(match.group(1)))


def managed(kube: Kube) -> list[str]:
    """Every object labelled as gpufleet's, of every listable kind."""
    kinds = kube.ok("api-resources", "--verbs=list", "-o", "name").split()
    found = []
    for kind in kinds:
        if kind in ("events", "events.events.k8s.io"):
            continue
        out = kube.attempt("get", kind, "-A", "-l", MANAGED, "-o", "name")
        found += [line for line in out.out.split() if line]
    return found


def test_deploy_again_preview_destroy(bare: Kube, tmp_path: Path) -> None:
    """Create everything; a second deploy and a preview change nothing; destroy leaves no gpufleet object and
    no gpufleet label on the hosts (Pulumi `up`/`preview`/`destroy` through the Automation API)."""
    assert bare.twin is not None
    env = {**pulumi_env(toolchain("1.35")), "PULUMI_CONFIG_PASSPHRASE": "test"}
    path = stack_file(tmp_path, bare.kubeconfig)
    backend = ["--backend", f"file://{tmp_path / 'state'}"]
    assert not managed(bare), "a bare twin has no gpufleet objects"

    first = invoke("deploy", "--stack", str(path), *backend, env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    created = counts(first.stdout, "deployed")
    assert created.get("create", 0) > 50 and set(created) <= {"create", "same"}
    # Kueue's version comes from its real chart's labels; the GPU operator's is its stand-in's own, so it proves
    # nothing and is not checked here.
    assert "Kueue v0.19.2 runs" in first.stdout
    queues = {q["metadata"]["name"] for q in bare.items("clusterqueues.kueue.x-k8s.io")}
    assert {"vision", "nlp"} <= queues
    assert bare.get("node", "gpu-h100-01")["metadata"]["labels"]["gpufleet.io/pool"] == "h100"

    second = invoke("deploy", "--stack", str(path), *backend, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert set(counts(second.stdout, "deployed")) == {"same"}, [
        ln for ln in second.stdout.splitlines() if ln.startswith("~") or "update" in ln
    ][:20]

    preview = invoke("preview", "--stack", str(path), *backend, env=env)
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert set(counts(preview.stdout, "preview of")) == {"same"}
    # compared with the rollout facts the deploy recorded in the state: nothing rolls
    assert "no node group or NodePool rolls" in preview.stdout.splitlines()

    gone = invoke("destroy", "--stack", str(path), "--yes", *backend, env=env)
    assert gone.returncode == 0, [
        ln for ln in gone.stdout.splitlines() if ln.startswith("!") or "destroy" in ln
    ][-15:] + gone.stderr.splitlines()[-6:]
    eventually(lambda: not managed(bare), "every gpufleet object to be gone", 120, 2)
    labels = bare.get("node", "gpu-h100-01")["metadata"]["labels"]
    assert "gpufleet.io/pool" not in labels
    # What the twin runs itself was adopted, never owned: it is still there.
    assert bare.items("deployments", "kueue-system") and bare.items("deployments", "gpu-operator")
    assert json.loads(bare.ok("get", "crd", "clusterqueues.kueue.x-k8s.io", "-o", "json"))


def test_an_aws_stacks_kubernetes_side_goes_through_the_same_lifecycle(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """example-prod's Kubernetes side (GpuStack on a provider for the twin: the scheduling component and the
    monitoring objects) is created by `pulumi up`, changes nothing on a second one and leaves no gpufleet
    object after `pulumi destroy` (the AWS resources themselves stay under Pulumi's mocks, tests/infra)."""
    from infra.stackfile import load_stack
    from twin.lifecycle import stack, twin_spec

    twin = start_twin(tmp_path_factory, "example-prod", bare=True)
    try:
        kube = Kube.of(twin)
        spec = twin_spec(load_stack(ROOT / "Pulumi.example-prod.yaml"), twin.kubeconfig)
        target = stack(spec, twin.folder / "lifecycle", toolchain("1.35"))
        first = target.up(color="never")
        assert first.summary.resource_changes.get("create", 0) > 50
        rules = kube.items("prometheusrules.monitoring.coreos.com", "monitoring")
        assert rules and all(r["metadata"]["labels"].get("release") == "kube-prometheus-stack" for r in rules)
        again = target.up(color="never")
        assert set(again.summary.resource_changes) == {"same"}
        target.destroy(color="never")
        eventually(lambda: not managed(kube), "every gpufleet object to be gone", 120, 2)
    finally:
        twin.stop()


VALUES = [
    0,
    "0Gi",
    544,
    1000,
    "6144Gi",
    "5248Gi",
    "1.5",
    "0.5",
    "192Gi",
    "1024",
    "1536Mi",
    "2Ti",
    "100m",
    "1000m",
]


def test_quantities_are_written_as_the_api_server_reads_them_back(metal_twin: Kube) -> None:
    """`scheduler.kueue.canonical_quantity` against the real components: each value, stored as a ClusterQueue's
    nominal quota, reads back exactly as the function writes it. Kueue's mutating webhook for ClusterQueues
    decodes the object into its Go types (resource.Quantity) and writes it back in apimachinery's canonical
    form; the API server alone keeps an int-or-string CRD field as it was sent."""
    from scheduler.kueue import canonical_quantity

    name = "quantity-probe"
    resources = [{"name": f"example.com/r{i}", "nominalQuota": v} for i, v in enumerate(VALUES)]
    cohort = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"resourceGroups": [{"coveredResources": [r["name"] for r in resources],
                                     "flavors": [{"name": "probe", "resources": resources}]}]},
    }  # fmt: skip
    assert metal_twin.create(cohort).ok
    try:
        spec = metal_twin.get("clusterqueue.kueue.x-k8s.io", name)["spec"]
        stored = spec["resourceGroups"][0]["flavors"][0]
        assert [r["nominalQuota"] for r in stored["resources"]] == [canonical_quantity(v) for v in VALUES]
    finally:
        metal_twin.attempt("delete", "clusterqueue.kueue.x-k8s.io", name)
