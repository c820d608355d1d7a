"""The versions recipe: every chart, image, AMI release and tool version the toolkit deploys, pinned in one place.

Nothing floats to "latest": a newly published GPU AMI or chart has broken every GPU pod for users before, so an
upgrade is a reviewed change to this file (or to `gpufleet:versions` in a stack file), never a side effect of a
deploy. Per-Kubernetes-minor pins (AMI releases, cluster-autoscaler and kube-scheduler images) live in
`PER_MINOR`; the supported Kubernetes range is exactly the minors listed there, because the cluster-autoscaler
and kube-scheduler images must match the control plane's minor.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


@dataclass(frozen=True)
class MinorPins:
    """Pins that must move together with the Kubernetes minor version."""

    kubernetes_patch: str  # upstream patch release: kube-scheduler image tag for the `existing` platform
    al2023_nvidia_ami_release: str  # EKS managed node group release_version (k8s patch - AMI build date)
    bottlerocket_nvidia_release: str  # Bottlerocket release_version for the *-nvidia variant
    cluster_autoscaler_image: str  # registry.k8s.io/autoscaling/cluster-autoscaler tag (same minor as k8s)


# Checked 2026-11-30. kube-scheduler: the 2026-08-20 upstream patch set (v1.36.4, v1.35.8, v1.34.11) and the
# final 1.33 patch (v1.33.13, 1.33 is end of life upstream). AL2023 NVIDIA: all four rows of amazon-eks-ami
# release v20260930 (format "<EKS k8s patch>-<YYYYMMDD>"); later AMI releases exist (v20261023, v20261031,
# v20261119) but their per-minor release versions were not confirmed. Bottlerocket: "<OS version>-<commit>",
# one OS release for every minor (1.65.0, 2026-09-03; 1.66.0 is out but its commit id was not confirmed).
# cluster-autoscaler: the 2026-07-22 patch set (kubernetes/k8s.io#9760).
PER_MINOR: dict[str, MinorPins] = {
    "1.33": MinorPins("v1.33.13", "1.33.13-20260930", "1.65.0-0be31b34", "v1.33.6"),
    "1.34": MinorPins("v1.34.11", "1.34.11-20260930", "1.65.0-0be31b34", "v1.34.5"),
    "1.35": MinorPins("v1.35.8", "1.35.8-20260930", "1.65.0-0be31b34", "v1.35.2"),
    "1.36": MinorPins("v1.36.4", "1.36.4-20260930", "1.65.0-0be31b34", "v1.36.1"),
}
SUPPORTED_KUBERNETES: tuple[str, ...] = tuple(PER_MINOR)
DEFAULT_KUBERNETES = "1.35"


class Versions(BaseModel):
    """`gpufleet:versions`: every key optional; unset keys take the pinned defaults below."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    # Node images (None: the pin for the cluster's Kubernetes minor from PER_MINOR).
    al2023_nvidia_ami_release: str | None = None
    bottlerocket_nvidia_release: str | None = None
    # NVIDIA stack. The driver branch is the one the AL2023 NVIDIA AMIs ship, so bare metal matches the cloud
    # (580 by default; since AMI v20260917 a 595 driver is also present, selected only for G7 instances).
    nvidia_driver_branch: str = "580"
    # Exact driver version bare-metal hosts install (Ansible `nvidia_driver_version`), so every host of a fleet
    # runs the same driver and Fabric Manager; raising it upgrades the hosts on the next `invoke metal --reboot`.
    # 580.95.05: a datacenter release of the 580 branch in NVIDIA's CUDA repositories.
    nvidia_driver_version: str = "580.95.05"
    nvidia_container_toolkit: str = "1.20.0"  # the toolkit GPU operator v26.7.0 deploys
    gpu_operator_chart: str = "v26.7.0"
    # Scheduling and autoscaling.
    kueue_chart: str = "0.19.2"
    cluster_autoscaler_chart: str = "9.59.0"
    cluster_autoscaler_image: str | None = None
    kube_scheduler_image: str | None = None
    # AWS add-ons.
    # eks-charts versions this chart with a leading "v". v0.5.31 ships image v0.5.21-eksbuild.9 (Aug 2026); a
    # later bump to v0.5.21-eksbuild.13 (eks-charts#1366) exists but its chart number was not confirmed.
    efa_device_plugin_chart: str = "v0.5.31"
    node_monitoring_agent_addon: str = "v1.6.6-eksbuild.1"

    def resolved(self, kubernetes_version: str) -> Versions:
        """A copy with every per-minor pin filled in for this Kubernetes minor."""
        pins = PER_MINOR[kubernetes_version]
        return self.model_copy(
            update={
                "al2023_nvidia_ami_release": self.al2023_nvidia_ami_release or pins.al2023_nvidia_ami_release,
                "bottlerocket_nvidia_release": (
                    self.bottlerocket_nvidia_release or pins.bottlerocket_nvidia_release
                ),
                "cluster_autoscaler_image": self.cluster_autoscaler_image or pins.cluster_autoscaler_image,
                "kube_scheduler_image": self.kube_scheduler_image or pins.kubernetes_patch,
            }
        )


# Chart repositories (the versions above are the only thing that changes between releases).
CHART_REPOS: dict[str, str] = {
    "gpu-operator": "https://helm.ngc.nvidia.com/nvidia",
    "kueue": "oci://registry.k8s.io/kueue/charts",
    "cluster-autoscaler": "https://kubernetes.github.io/autoscaler",
    "aws-efa-k8s-device-plugin": "https://aws.github.io/eks-charts",
}
