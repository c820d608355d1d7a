"""The SSM names that identify a pinned AMI release (pure; no AWS)."""

from __future__ import annotations

from infra.preflight.ami import al2023_release, bottlerocket_release


def test_al2023_release_maps_to_the_dated_image_parameter() -> None:
    ami = al2023_release("1.35", "x86_64", "1.35.2-20261110")
    assert ami.problem == ""
    assert ami.parameters == (
        "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/"
        "amazon-eks-node-al2023-x86_64-nvidia-1.35-v20261110/image_id",
    )


def test_al2023_arm_release() -> None:
    ami = al2023_release("1.34", "arm64", "1.34.5-20261110")
    assert ami.parameters == (
        "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/arm64/nvidia/"
        "amazon-eks-node-al2023-arm64-nvidia-1.34-v20261110/image_id",
    )


def test_al2023_release_for_another_minor_is_a_problem() -> None:
    ami = al2023_release("1.35", "x86_64", "1.34.5-20261110")
    assert ami.parameters == ()
    assert ami.problem == "release 1.34.5-20261110 is built for Kubernetes 1.34, but the cluster runs 1.35"


def test_malformed_releases_are_problems() -> None:
    assert "expected <kubernetes patch>-<YYYYMMDD>" in al2023_release("1.35", "x86_64", "v20261110").problem
    assert "expected <version>-<commit>" in bottlerocket_release("1.35", "x86_64", "latest").problem


def test_bottlerocket_release_names() -> None:
    ami = bottlerocket_release("1.35", "x86_64", "1.50.2-0ab3c4d1")
    assert ami.parameters == (
        "/aws/service/bottlerocket/aws-k8s-1.35-nvidia/x86_64/1.50.2-0ab3c4d1/image_id",
        "/aws/service/bottlerocket/aws-k8s-1.35-nvidia/x86_64/1.50.2/image_id",
    )
    assert bottlerocket_release("1.35", "arm64", "1.50.2").parameters == (
        "/aws/service/bottlerocket/aws-k8s-1.35-nvidia/arm64/1.50.2/image_id",
    )
