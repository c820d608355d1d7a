"""Where AWS publishes each pinned GPU AMI release: the SSM public parameters preflight looks for.

EKS managed node groups take a `release_version`; the recipe pins one per Kubernetes minor
(`infra.versions.PER_MINOR`). AWS publishes every release as a public SSM parameter, so "the pinned release
exists in this region" is one `GetParameters` call:

- AL2023 NVIDIA, release `1.35.2-20261110` ->
  `/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-1.35-v20261110/image_id`
- AL2023 standard (the system pool), same release string ->
  `/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.35-v20261110/image_id`
- Bottlerocket NVIDIA, release `1.50.2-0ab3c4d1` ->
  `/aws/service/bottlerocket/aws-k8s-1.35-nvidia/x86_64/1.50.2-0ab3c4d1/image_id`; Bottlerocket also publishes
  the bare version (`.../x86_64/1.50.2/image_id`), and either one counts as published.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra import catalog
from infra.spec import ClusterSpec, NodePool

AL2023_RELEASE = re.compile(r"^(?P<minor>\d+\.\d+)\.\d+-(?P<date>\d{8})$")
BOTTLEROCKET_RELEASE = re.compile(r"^(?P<version>\d+\.\d+\.\d+)(-[0-9a-f]{8})?$")


@dataclass(frozen=True)
class AmiRelease:
    """A pool's pinned AMI release and the SSM parameter names that prove it is published."""

    family: str  # AL2023_NVIDIA | BOTTLEROCKET_NVIDIA
    release: str
    parameters: tuple[str, ...]  # any one existing means the release is published
    browse: str  # an SSM path under which the published releases can be listed
    version_key: str  # the gpufleet:versions key that pins it
    problem: str = ""  # set when the pinned string cannot be a release of this family / minor


def _arch(pool: NodePool) -> str:
    itype = catalog.lookup(pool.instance_type or "")
    return "arm64" if itype is not None and itype.arch == "arm64" else "x86_64"


def al2023_release(minor: str, arch: str, release: str, variant: str = "nvidia") -> AmiRelease:
    """An AL2023 release of the `nvidia` variant (GPU pools) or the `standard` one (the system pool)."""
    family = "AL2023_NVIDIA" if variant == "nvidia" else "AL2023"
    base = f"/aws/service/eks/optimized-ami/{minor}/amazon-linux-2023/{arch}/{variant}"
    key = "gpufleet:versions.al2023NvidiaAmiRelease"
    match = AL2023_RELEASE.match(release)
    if match is None:
        problem = f"{release!r} is not an AL2023 release; expected <kubernetes patch>-<YYYYMMDD>, e.g. {minor}.2-20261110"
        return AmiRelease(family, release, (), base, key, problem)
    if match["minor"] != minor:
        problem = f"release {release} is built for Kubernetes {match['minor']}, but the cluster runs {minor}"
        return AmiRelease(family, release, (), base, key, problem)
    name = f"{base}/amazon-eks-node-al2023-{arch}-{variant}-{minor}-v{match['date']}/image_id"
    return AmiRelease(family, release, (name,), base, key)


def system_release(spec: ClusterSpec) -> AmiRelease:
    """The system pool's AL2023 standard release: the same release string as the NVIDIA variant (EKS publishes
    every AL2023 variant under one release version), but its own SSM parameter, which must exist too."""
    itype = catalog.lookup(spec.system_pool.instance_type)
    arch = "arm64" if itype is not None and itype.arch == "arm64" else "x86_64"
    release = spec.versions.al2023_nvidia_ami_release or ""
    return al2023_release(spec.cluster.kubernetes_version, arch, release, variant="standard")


def bottlerocket_release(minor: str, arch: str, release: str) -> AmiRelease:
    base = f"/aws/service/bottlerocket/aws-k8s-{minor}-nvidia/{arch}"
    key = "gpufleet:versions.bottlerocketNvidiaRelease"
    match = BOTTLEROCKET_RELEASE.match(release)
    if match is None:
        problem = (
            f"{release!r} is not a Bottlerocket release; expected <version>-<commit>, e.g. 1.50.2-0ab3c4d1"
        )
        return AmiRelease("BOTTLEROCKET_NVIDIA", release, (), base, key, problem)
    names = dict.fromkeys((f"{base}/{release}/image_id", f"{base}/{match['version']}/image_id"))
    return AmiRelease("BOTTLEROCKET_NVIDIA", release, tuple(names), base, key)


def pool_release(spec: ClusterSpec, pool: NodePool) -> AmiRelease:
    """The AMI release a pool's node group will run (the spec's versions are already resolved per minor)."""
    minor, versions = spec.cluster.kubernetes_version, spec.versions
    if pool.ami_family == "BOTTLEROCKET_NVIDIA":
        return bottlerocket_release(minor, _arch(pool), versions.bottlerocket_nvidia_release or "")
    return al2023_release(minor, _arch(pool), versions.al2023_nvidia_ami_release or "")
