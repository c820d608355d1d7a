"""Which Kubernetes minors each platform accepts (infra/versions.py `PER_MINOR`): a minor upstream has released but
EKS does not offer yet (1.37) runs on existing clusters with its kube-scheduler patch, and an aws stack asking for
it is refused in one line that names the minors EKS does offer (exit 2, before anything is planned)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from infra.errors import ConfigError
from infra.scheduling import scheduler_inputs
from infra.stackfile import parse_config
from infra.versions import EKS_KUBERNETES, PER_MINOR, SUPPORTED_KUBERNETES, TWIN_MINORS
from scheduler.placement import secondary_scheduler
from tests.conftest import ROOT
from tests.preflight.helpers import invoke, stack_doc, write_stack

NEWEST = "1.37"


def config_at(stack: str, minor: str) -> dict[str, Any]:
    config = copy.deepcopy(stack_doc(stack)["config"])
    config["gpufleet:cluster"]["kubernetesVersion"] = minor
    return config


def test_a_minor_has_every_eks_pin_or_none() -> None:
    """Half a row would deploy an AMI of one minor with an autoscaler of none; an AL2023 release names its
    minor's patch ("<k8s patch>-<build date>")."""
    for minor, pins in PER_MINOR.items():
        eks = (
            pins.al2023_nvidia_ami_release,
            pins.bottlerocket_nvidia_release,
            pins.cluster_autoscaler_image,
        )
        assert all(p is None for p in eks) or None not in eks, minor
        assert pins.kubernetes_patch.startswith(f"v{minor}."), minor
        if pins.al2023_nvidia_ami_release:
            assert pins.al2023_nvidia_ami_release.startswith(f"{pins.kubernetes_patch[1:]}-"), minor
            assert pins.cluster_autoscaler_image and pins.cluster_autoscaler_image.startswith(f"v{minor}.")
    assert NEWEST in SUPPORTED_KUBERNETES and NEWEST not in EKS_KUBERNETES


def test_an_existing_cluster_runs_1_37_with_its_kube_scheduler() -> None:
    spec = parse_config(config_at("metal", NEWEST), "metal")
    assert spec.versions.kube_scheduler_image == "v1.37.2"
    policy, pools = scheduler_inputs(spec)
    (deployment,) = [o for o in secondary_scheduler(policy, pools) if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"


@pytest.mark.parametrize("stack", ["example-prod", "example-karpenter", "dev"])
def test_an_aws_stack_is_refused_1_37_naming_what_eks_offers(stack: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_at(stack, NEWEST), stack)
    (problem,) = info.value.problems
    assert problem.startswith("gpufleet:cluster.kubernetesVersion: EKS does not list Kubernetes 1.37 yet")
    assert f"on aws: {', '.join(EKS_KUBERNETES)}" in problem and "1.36" in problem


def test_invoke_plan_refuses_it_with_exit_2_and_one_line(tmp_path: Path) -> None:
    doc = stack_doc("example-prod")
    doc["config"] = config_at("example-prod", NEWEST)
    stack = write_stack(tmp_path, "newest", doc)
    done = invoke("plan", "--stack", str(stack), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        f"error: {stack}: gpufleet:cluster.kubernetesVersion: EKS does not list Kubernetes 1.37"
    )
    assert not (tmp_path / "out" / "plan.json").exists()


def test_invoke_twin_refuses_an_aws_stack_at_1_37_before_anything_starts(tmp_path: Path) -> None:
    """The twin is the stack's cluster: an aws stack's cluster cannot run a minor EKS does not offer."""
    done = invoke("twin", "--stack", "example-prod", "--minor", NEWEST, "--run", "true")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --minor: EKS does not list Kubernetes 1.37 yet")


def test_the_twin_runs_every_minor_an_example_stack_names_and_the_newest() -> None:
    minors = {stack_doc(p.stem.removeprefix("Pulumi."))["config"].get("gpufleet:cluster", {}).get(
        "kubernetesVersion") for p in ROOT.glob("Pulumi.*.yaml")}  # fmt: skip
    assert minors - {None} <= set(TWIN_MINORS) and NEWEST in TWIN_MINORS
