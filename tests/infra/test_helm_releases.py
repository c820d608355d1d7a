"""Every Helm release of the programs goes through one helper: pinned, atomic, with its own timeout.

Kueue's release is the scheduler component's (the scheduler cannot import infra) and is left out here.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra import build
from tests.conftest import load_example
from tests.infra.conftest import Mocks, after_registration

RELEASE = "kubernetes:helm.sh/v3:Release"
# seconds, by chart: what each call site of `chart_release` asks for
TIMEOUTS = {
    "gpu-operator": 1200,
    "cluster-autoscaler": 1200,
    "aws-efa-k8s-device-plugin": 1200,
    "kube-prometheus-stack": 900,
    "nvsentinel": 900,
    "karpenter": 600,
    "karpenter-crd": 600,
}


@pytest.mark.parametrize("stack", ["example-karpenter", "example-prod", "metal"])
@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_every_release_is_pinned_atomic_and_timed(mocks: Mocks, stack: str) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        releases = [r for r in m.of_type(RELEASE) if not r.inputs["chart"].endswith("/kueue")]
        assert releases
        for r in releases:
            chart = r.inputs["chart"].rsplit("/", 1)[-1]
            assert r.inputs["version"] and r.inputs["atomic"] is True, r.name
            assert r.inputs["timeout"] == TIMEOUTS[chart], r.name
            # the Karpenter CRD release alone keeps what a failed upgrade created (deleting a CRD deletes its objects)
            assert r.inputs.get("cleanupOnFail") is (None if chart == "karpenter-crd" else True), r.name

    outputs = build(load_example(stack))
    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)
