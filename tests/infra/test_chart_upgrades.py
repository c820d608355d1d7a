"""A chart bump upgrades the chart's CRDs the way each chart documents, so the upgrade neither fails Helm's
validation nor leaves a new controller on stale CRDs. The charts' values.yaml at the pinned tags are the
references (shared data, read from the upstream tags)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra import build
from infra.monitoring.stack import SYSTEM_NODES, kube_prometheus_stack_values
from infra.versions import Versions
from tests.conftest import load_example
from tests.infra.conftest import Mocks, after_registration

RELEASE = "kubernetes:helm.sh/v3:Release"


def _values(shared_dir: Path, chart: str) -> tuple[str, dict[str, Any]]:
    path = shared_dir / "crds" / chart / "values.yaml"
    return path.read_text(), yaml.safe_load(path.read_text())


def test_the_gpu_operator_chart_upgrades_its_crds_in_a_hook_that_needs_validation_off(
    shared_dir: Path,
) -> None:
    """gpu-operator v26.7.0 deployments/gpu-operator/values.yaml:87-89: the premise of the release's flag."""
    text, values = _values(shared_dir, "gpu-operator")
    assert values["operator"]["upgradeCRD"] is True
    assert "requires --disable-openapi-validation" in text


@pytest.mark.parametrize("stack", ["example-prod", "metal"])
@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_the_gpu_operator_release_skips_openapi_validation(mocks: Mocks, stack: str) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        by_chart = {r.inputs["chart"].rsplit("/", 1)[-1]: r for r in m.of_type(RELEASE)}
        assert by_chart["gpu-operator"].inputs.get("disableOpenapiValidation") is True
        # only that release: every other chart keeps Helm's validation
        others = [c for c, r in by_chart.items() if r.inputs.get("disableOpenapiValidation")]
        assert others == ["gpu-operator"], others

    outputs = build(load_example(stack))
    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)


@pytest.mark.parametrize("stack", ["example-prod", "metal"])
def test_kube_prometheus_stack_upgrades_its_crds_with_its_job(shared_dir: Path, stack: str) -> None:
    """kube-prometheus-stack 88.5.3 values.yaml:33-43: the CRD upgrade job is off by default, its busybox image
    `latest`; gpufleet turns it on with a pinned busybox, and on aws on the system nodes."""
    _, chart = _values(shared_dir, "prometheus-operator/kube-prometheus-stack")
    assert chart["crds"]["upgradeJob"]["enabled"] is False  # why gpufleet sets it
    assert chart["crds"]["upgradeJob"]["image"]["busybox"]["tag"] == "latest"
    spec = load_example(stack)
    job = kube_prometheus_stack_values(spec)["crds"]["upgradeJob"]
    assert job["enabled"] is True and job["forceConflicts"] is True
    assert job["image"]["busybox"]["tag"] == Versions().kps_crd_job_busybox != "latest"
    assert job.get("nodeSelector") == (dict(SYSTEM_NODES) if spec.platform == "aws" else None)
