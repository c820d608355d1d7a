"""No custom resource is applied before the Helm release that installs its CRD, in every example stack.

Kubernetes serves a custom kind only once its CustomResourceDefinition is established ("Create a
CustomResourceDefinition": the new RESTful endpoint exists after the CRD is created,
https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/); until then an
apply answers "no matches for kind". Helm does not order objects across releases, and the cluster-autoscaler
chart renders its ServiceMonitor with no capability check
(charts/cluster-autoscaler/templates/servicemonitor.yaml @cluster-autoscaler-chart-9.59.0), so the order must
be an edge in the Pulumi dependency graph. The graph here is what the program registers under Pulumi's mocks
(explicit and input dependencies, with components expanded to their children by the SDK).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra import build
from tests.conftest import ROOT, load_example
from tests.infra.conftest import Mocks, Recorded, after_registration
from tests.preflight.helpers import run_task, write_stack

RELEASE = "kubernetes:helm.sh/v3:Release"
# The chart whose release installs each API group's CRDs (the chart's crds/ or templates, at the pinned versions).
CRD_CHARTS: dict[str, str] = {
    "monitoring.coreos.com": "kube-prometheus-stack",
    "karpenter.sh": "karpenter-crd",
    "karpenter.k8s.aws": "karpenter-crd",
    "kueue.x-k8s.io": "kueue",
    "nvidia.com": "gpu-operator",
}
# Slurm stacks (cluster.orchestrator: slurm) create no Kubernetes objects: `invoke render` writes their files.
STACKS = sorted(
    p.name.removeprefix("Pulumi.").removesuffix(".yaml")
    for p in ROOT.glob("Pulumi.*.yaml")
    if "orchestrator: slurm" not in p.read_text()
)


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


def _monitors_enabled(values: Any) -> bool:
    """A chart's values turn on a Prometheus-operator object: `serviceMonitor`/`podMonitor` with `enabled: true`,
    or Kueue's `enablePrometheus` (its chart's ServiceMonitor, charts/kueue/templates @v0.19.2)."""
    if isinstance(values, dict):
        for key, value in values.items():
            if key in ("serviceMonitor", "podMonitor") and isinstance(value, dict) and value.get("enabled"):
                return True
            if key == "enablePrometheus" and value is True:
                return True
            if _monitors_enabled(value):
                return True
    elif isinstance(values, list):
        return any(_monitors_enabled(v) for v in values)
    return False


def _chart(release: Recorded) -> str:
    return str(release.inputs.get("chart", "")).rsplit("/", 1)[-1]


def consumed_groups(r: Recorded) -> set[str]:
    """The API groups with CRDs (CRD_CHARTS) whose objects `r` applies, directly or through its chart."""
    groups: set[str] = set()
    if r.typ == RELEASE:
        if _monitors_enabled(r.inputs.get("values")) and _chart(r) != CRD_CHARTS["monitoring.coreos.com"]:
            groups.add("monitoring.coreos.com")
    elif r.typ.startswith("kubernetes:yaml/"):
        groups |= {_group(str(o.get("apiVersion", ""))) for o in r.inputs.get("objs") or []}
    elif r.typ.startswith("kubernetes:"):
        groups.add(_group(str(r.inputs.get("apiVersion", ""))) or r.typ.split(":")[1].split("/")[0])
    return groups & set(CRD_CHARTS)


def _closure(start: Recorded, by_urn: dict[str, Recorded]) -> Iterator[Recorded]:
    seen: set[str] = set()
    todo = list(start.dependencies)
    while todo:
        urn = todo.pop()
        if urn in seen or urn not in by_urn:
            continue
        seen.add(urn)
        yield by_urn[urn]
        todo.extend(by_urn[urn].dependencies)


def crd_order_problems(m: Mocks, fresh_cluster: bool) -> list[str]:
    """Each object of a CRD group waits (transitively) for the release installing that CRD. On a cluster the
    stack creates, that release must be in the stack at all: nothing else can have installed the CRD."""
    by_urn = {r.urn: r for r in m.resources if r.urn}
    installed = {_chart(r) for r in m.of_type(RELEASE)}
    problems = []
    for r in m.resources:
        for group in sorted(consumed_groups(r)):
            chart = CRD_CHARTS[group]
            if chart not in installed:
                if fresh_cluster:
                    problems.append(f"{r.typ} {r.name}: {group} objects, but nothing installs {chart}")
                continue
            if not any(d.typ == RELEASE and _chart(d) == chart for d in _closure(r, by_urn)):
                problems.append(f"{r.typ} {r.name}: {group} objects, not after the {chart} release")
    return problems


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_no_custom_resource_before_the_release_that_installs_its_crd(
    mocks: Mocks, stack: str
) -> pulumi.Output[Any]:
    spec = load_example(stack)
    build(spec)

    def check(m: Mocks) -> None:
        consumers = [r for r in m.resources if consumed_groups(r)]
        assert consumers, "the walk found no custom resource at all"
        assert crd_order_problems(m, fresh_cluster=spec.platform == "aws") == []

    return after_registration(lambda: check(mocks))


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_the_autoscalers_service_monitor_waits_for_kube_prometheus_stack(
    mocks: Mocks,
) -> pulumi.Output[Any]:
    """example-prod's cluster-autoscaler release renders a ServiceMonitor and so depends on the
    kube-prometheus-stack release, not only on its policy and the node groups."""
    build(load_example("example-prod"))

    def check(m: Mocks) -> None:
        (ca,) = [r for r in m.of_type(RELEASE) if _chart(r) == "cluster-autoscaler"]
        assert consumed_groups(ca) == {"monitoring.coreos.com"}
        by_urn = {r.urn: r for r in m.resources if r.urn}
        assert "kube-prometheus-stack" in {_chart(d) for d in _closure(ca, by_urn) if d.typ == RELEASE}

    return after_registration(lambda: check(mocks))


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_karpenters_service_monitor_is_on_with_prometheus_and_waits_for_kube_prometheus_stack(
    mocks: Mocks,
) -> pulumi.Output[Any]:
    """example-karpenter with `prometheus: install`: the Karpenter chart renders its ServiceMonitor (chart
    values @v1.14.1 `serviceMonitor.enabled`, `additionalLabels`), labelled for the stack's Prometheus, and its
    release waits for the kube-prometheus-stack release that installs the ServiceMonitor CRD."""
    spec = load_example("example-karpenter")
    mon = spec.cluster.monitoring.model_copy(update={"prometheus": "install"})
    build(spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"monitoring": mon})}))

    def check(m: Mocks) -> None:
        (karpenter,) = [r for r in m.of_type(RELEASE) if _chart(r) == "karpenter"]
        assert karpenter.inputs["values"]["serviceMonitor"] == {
            "enabled": True,
            "additionalLabels": {"release": "kube-prometheus-stack"},
        }
        by_urn = {r.urn: r for r in m.resources if r.urn}
        assert "kube-prometheus-stack" in {_chart(d) for d in _closure(karpenter, by_urn) if d.typ == RELEASE}
        assert crd_order_problems(m, fresh_cluster=True) == []

    return after_registration(lambda: check(mocks))


def test_every_example_stack_is_walked() -> None:
    assert {"dev", "example-prod", "example-karpenter"} <= set(STACKS)


@pytest.mark.parametrize("monitoring", [True, {"prometheus": "existing"}])
def test_existing_prometheus_is_refused_on_a_cluster_the_stack_creates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monitoring: Any
) -> None:
    """`existing` (and `true`) assumes the monitoring.coreos.com CRDs are served; on aws the stack creates the
    cluster, so they cannot be. Refused before anything is created: the key path, exit 2."""
    doc = yaml.safe_load((ROOT / "Pulumi.example-prod.yaml").read_text())
    doc["config"]["gpufleet:cluster"]["monitoring"] = monitoring
    path = write_stack(tmp_path, "existing-prom", doc)
    result = run_task(capsys, "plan", "--stack", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gpufleet:cluster.monitoring.prometheus" in result.stderr and "install" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
