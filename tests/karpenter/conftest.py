"""Karpenter test fixtures: the shared v1.14.1 CRDs (AWS build), Karpenter variants of the example stacks."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from scheduler.validation import load_crd_schemas
from tests.conftest import EXAMPLE_STACKS, ROOT
from tests.infra.conftest import mocks  # noqa: F401 (the Pulumi mocks fixture, shared)

# The AWS build of the CRDs (core schema plus the AWS label-domain CEL rules); `core/` is the provider-neutral
# copy and must not shadow it (SOURCES.md of the reference data).
AWS_CRDS = ("karpenter.sh_nodepools.yaml", "karpenter.k8s.aws_ec2nodeclasses.yaml")
AWS_STACKS = [s for s in EXAMPLE_STACKS if s != "metal"]


@pytest.fixture(scope="session")
def karpenter_schemas(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[Any, Any]:
    folder = tmp_path_factory.mktemp("karpenter-crds")
    for name in AWS_CRDS:
        shutil.copy(shared_dir / "crds" / "karpenter" / name, folder / name)
    schemas = load_crd_schemas(folder)
    assert {k[1] for k in schemas} == {"NodePool", "EC2NodeClass"}
    return schemas


def example_config(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text())["config"]


def as_karpenter(config: dict[str, Any]) -> dict[str, Any]:
    """A stack under Karpenter: the autoscaler switched, Kubernetes 1.36 (the do-not-disrupt policy's GA),
    no minimum sizes on whole-GPU pools (Karpenter keeps none), no ProvisioningRequests (Karpenter serves none)."""
    out = copy.deepcopy(config)
    out.get("gpufleet:scheduling", {}).pop("provisioningRequests", None)
    cluster = out["gpufleet:cluster"]
    cluster["autoscaler"] = "karpenter"
    cluster["kubernetesVersion"] = "1.36"
    for pool in out["gpufleet:nodePools"]:
        if "sharing" not in pool:
            pool.pop("minSize", None)
            pool.pop("desiredSize", None)
    return out


def karpenter_example(name: str) -> ClusterSpec:
    """An AWS example stack as it is under Karpenter (example-karpenter as it is)."""
    return parse_config(as_karpenter(example_config(name)), name)
