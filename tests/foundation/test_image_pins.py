"""Image pins in `gpufleet:versions`: tags, tags with digests, and (for the extender) whole references used
verbatim; the grammar is distribution/reference's, so what is accepted is what a container runtime parses."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from infra.errors import ConfigError
from infra.images import ImageRef, parse, pin_problem
from infra.scheduling import scheduler_inputs
from infra.stackfile import parse_config
from infra.versions import EXTENDER_REPOSITORY
from scheduler import compile
from tests.conftest import ROOT

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("image", "ref"),
    [
        ("ghcr.io/gpufleet/gpufleet-extender:0.1.0", ImageRef("ghcr.io", "gpufleet/gpufleet-extender", "0.1.0")),
        (f"registry.k8s.io/kube-scheduler:v1.35.8@{DIGEST}",
         ImageRef("registry.k8s.io", "kube-scheduler", "v1.35.8", DIGEST)),
        (f"localhost:5000/team/extender@{DIGEST}", ImageRef("localhost:5000", "team/extender", "", DIGEST)),
        ("localhost/extender:1", ImageRef("localhost", "extender", "1")),
        ("python:3.11.7-slim", ImageRef("docker.io", "library/python", "3.11.7-slim")),
        ("team/tool:2", ImageRef("docker.io", "team/tool", "2")),
    ],
)  # fmt: skip
def test_references_split_as_the_runtime_splits_them(image: str, ref: ImageRef) -> None:
    """distribution/reference v0.6.0 normalize.go `splitDockerDomain`: the first path component is the registry
    when it contains "." or ":" or is `localhost`, otherwise the name is Docker Hub's (`library/` for one
    component); reference.go: `name [":" tag] ["@" digest]`."""
    assert parse(image) == ref
    assert ref.reference == (ref.digest or ref.tag)


@pytest.mark.parametrize(
    "image",
    ["ghcr.io/gpufleet/gpufleet-extender", "ghcr.io/Gpufleet/extender:1", "ghcr.io/x/y@sha256:abc",
     f"ghcr.io/x/y@sha512:{'0' * 128}", "ghcr.io/x/y:bad tag", "ghcr.io/x/y:é1", ":1"],
)  # fmt: skip
def test_what_is_not_a_pinned_reference(image: str) -> None:
    """No tag or digest (the runtime would pull `latest`), an upper-case path component, a short or non-sha256
    digest (only sha256 is accepted here), spaces, a non-ASCII tag (Go's `\\w` is ASCII): refused."""
    assert parse(image) is None
    assert pin_problem(image, whole_reference=True) is not None


def fragmentation_aware(stack: str, **versions: str) -> dict[str, Any]:
    config = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    config["gpufleet:scheduling"] = {**config.get("gpufleet:scheduling", {}),
                                     "placement": {"strategy": "FragmentationAware"}}  # fmt: skip
    config["gpufleet:versions"] = {**config.get("gpufleet:versions", {}), **versions}
    return dict(config)


def images(config: dict[str, Any]) -> dict[str, str]:
    objects = compile(*scheduler_inputs(parse_config(config, "metal")))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    return {c["name"]: c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}


def test_digest_pins_reach_the_pods_verbatim() -> None:
    whole = f"ghcr.io/a-fork/gpufleet-extender@{DIGEST}"
    got = images(fragmentation_aware("metal", extenderImage=whole, kubeSchedulerImage=f"v1.35.8@{DIGEST}"))
    assert got == {"kube-scheduler": f"registry.k8s.io/kube-scheduler:v1.35.8@{DIGEST}", "extender": whole}
    tagged = images(fragmentation_aware("metal", extenderImage=f"0.1.0@{DIGEST}"))
    assert tagged["extender"] == f"{EXTENDER_REPOSITORY}:0.1.0@{DIGEST}"
    assert tagged["kube-scheduler"] == "registry.k8s.io/kube-scheduler:v1.35.8"  # the minor's pin


@pytest.mark.parametrize(
    ("versions", "key", "words"),
    [
        ({"kubeSchedulerImage": "latest"}, "gpufleet:versions.kubeSchedulerImage", "never latest"),
        ({"kubeSchedulerImage": f"registry.k8s.io/kube-scheduler@{DIGEST}"}, "gpufleet:versions.kubeSchedulerImage",
         "is not a pinned image (a tag such as 0.1.0, tag@sha256:<digest>;"),
        ({"kubeSchedulerImage": f"v1.34.11@{DIGEST}"}, "gpufleet:versions.kubeSchedulerImage",
         "must match the cluster's Kubernetes minor"),
        ({"extenderImage": DIGEST}, "gpufleet:versions.extenderImage", "is a bare digest"),
        ({"extenderImage": "ghcr.io/x/y:latest"}, "gpufleet:versions.extenderImage", "never latest"),
    ],
)  # fmt: skip
def test_bad_pins_name_their_key(versions: dict[str, str], key: str, words: str) -> None:
    """The scheduler's image must stay a tag of its minor (`v1.35.x`, a digest may follow): its minor is checked
    against the cluster's (scheduler.checks). A bare digest names no image."""
    with pytest.raises(ConfigError) as info:
        parse_config(fragmentation_aware("metal", **versions), "metal")
    assert any(key in p and words in p for p in info.value.problems), info.value.problems
