"""Preflight's image check (infra.preflight.images) against a loopback registry that answers as the public ones do.

The registry follows opencontainers/distribution-spec v1.1.0 spec.md ("Pulling manifests": GET
/v2/<name>/manifests/<reference> by tag or digest, 200 with the manifest, 404 with MANIFEST_UNKNOWN; the
`Docker-Content-Digest` header is optional) and the distribution "Token Authentication Specification" (an
anonymous request gets 401 with `WWW-Authenticate: Bearer realm=...,service=...,scope=repository:<name>:pull`,
the realm hands out a token for that scope), as ghcr.io does. registry.k8s.io redirects image requests to the
registries behind it (kubernetes/registry.k8s.io cmd/archeio README: "a custom redirect/alias server"; the
images live in Artifact Registry), which is modelled by a redirect to another repository path that then
challenges on its own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from infra.preflight.findings import Finding, Severity
from infra.preflight.images import HttpRegistry, check_images, deployed_images
from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from infra.versions import EXTENDER_REPOSITORY, PROJECT_VERSION
from tests.conftest import ROOT

INDEX = "application/vnd.oci.image.index.v1+json"
BACKEND = "k8s-artifacts-prod/images/"  # where the redirected kube-scheduler requests land


def manifest(name: str) -> bytes:
    return json.dumps(
        {"schemaVersion": 2, "mediaType": INDEX, "manifests": [], "annotations": {"n": name}}
    ).encode()


class FakeRegistry:
    """Manifests by (repository, tag) and by digest; tokens per repository; optional redirects and privacy."""

    def __init__(self) -> None:
        self.tags: dict[tuple[str, str], bytes] = {}
        self.redirects: dict[str, str] = {}  # repository -> repository
        self.private: set[str] = set()
        self.digest_header = False
        self.seen: list[str] = []
        self.base = ""

    def publish(self, repository: str, tag: str) -> str:
        body = manifest(f"{repository}:{tag}")
        self.tags[(repository, tag)] = body
        return f"sha256:{sha256(body).hexdigest()}"

    def body(self, repository: str, reference: str) -> bytes | None:
        if reference.startswith("sha256:"):
            found = [b for (r, _), b in self.tags.items() if r == repository
                     and f"sha256:{sha256(b).hexdigest()}" == reference]  # fmt: skip
            return found[0] if found else None
        return self.tags.get((repository, reference))

    def answer(self, path: str, query: dict[str, list[str]], auth: str) -> tuple[int, dict[str, str], bytes]:
        self.seen.append(path)
        if path == "/token":
            scope = query["scope"][0]  # repository:<name>:pull
            return 200, {"Content-Type": "application/json"}, json.dumps({"token": f"t:{scope}"}).encode()
        repository, _, reference = path.removeprefix("/v2/").rpartition("/manifests/")
        if repository in self.redirects:
            return (
                307,
                {"Location": f"{self.base}/v2/{self.redirects[repository]}/manifests/{reference}"},
                b"",
            )
        scope = f"repository:{repository}:pull"
        if auth != f"Bearer t:{scope}" or repository in self.private:
            challenge = f'Bearer realm="{self.base}/token",service="fake",scope="{scope}"'
            return 401, {"WWW-Authenticate": challenge}, b'{"errors":[{"code":"UNAUTHORIZED"}]}'
        body = self.body(repository, reference)
        if body is None:
            return 404, {"Content-Type": "application/json"}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
        digest = {"Docker-Content-Digest": f"sha256:{sha256(body).hexdigest()}"} if self.digest_header else {}
        return 200, {"Content-Type": INDEX, **digest}, body


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRegistry]:
    fake = FakeRegistry()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            code, headers, body = fake.answer(
                url.path, parse_qs(url.query), self.headers.get("Authorization", "")
            )
            self.send_response(code)
            for key, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake.base = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv("GPUFLEET_REGISTRY_MIRRORS", f"ghcr.io={fake.base},registry.k8s.io={fake.base}")
    yield fake
    server.shutdown()


def stack(name: str, **versions: str) -> ClusterSpec:
    config = yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text())["config"]
    config["gpufleet:scheduling"] = {**config.get("gpufleet:scheduling", {}),
                                     "placement": {"strategy": "FragmentationAware"}}  # fmt: skip
    if versions:
        config["gpufleet:versions"] = {**config.get("gpufleet:versions", {}), **versions}
    return parse_config(config, name)


def by_key(findings: list[Finding]) -> dict[str, Finding]:
    return {f.subject.removeprefix("gpufleet:versions."): f for f in findings}


def test_a_published_image_gets_its_digest_and_an_unpublished_release_is_an_error(
    registry: FakeRegistry,
) -> None:
    """kube-scheduler found behind the redirect and the token challenge (no digest header: the digest is the
    sha256 of the manifest served); the extender's release tag not pushed (an error: the kubelet could not
    pull it)."""
    registry.redirects["kube-scheduler"] = f"{BACKEND}kube-scheduler"
    digest = registry.publish(f"{BACKEND}kube-scheduler", "v1.35.8")
    found = by_key(check_images(stack("metal")))
    assert found.keys() == {"kubeSchedulerImage", "extenderImage"}
    scheduler, extender = found["kubeSchedulerImage"], found["extenderImage"]
    assert scheduler.severity is Severity.OK
    assert scheduler.message == (f"registry.k8s.io/kube-scheduler:v1.35.8 is published ({digest}); to pin it by "
                                 f"digest: registry.k8s.io/kube-scheduler@{digest}")  # fmt: skip
    assert extender.severity is Severity.ERROR
    assert extender.message.startswith(f"{EXTENDER_REPOSITORY}:{PROJECT_VERSION}: ghcr.io has no such image")
    assert extender.fix.startswith(f"push the release's git tag (v{PROJECT_VERSION})")
    assert "set gpufleet:versions.extenderImage to a published tag or <name>@sha256:<digest>" in extender.fix


def test_digest_pins_are_asked_for_by_their_digest(registry: FakeRegistry) -> None:
    """A whole reference with a digest (used verbatim) and a tag with a digest: the registry is asked for the
    digest, which is what the kubelet pulls, and no pin is suggested."""
    registry.digest_header = True
    pushed = registry.publish("gpufleet/gpufleet-extender", "sha-0123abc")
    scheduler = registry.publish("kube-scheduler", "v1.35.8")
    spec = stack(
        "metal", extenderImage=f"{EXTENDER_REPOSITORY}@{pushed}", kubeSchedulerImage=f"v1.35.8@{scheduler}"
    )
    found = by_key(check_images(spec))
    assert {f.severity for f in found.values()} == {Severity.OK}
    assert "to pin it" not in found["extenderImage"].message + found["kubeSchedulerImage"].message
    assert f"/v2/gpufleet/gpufleet-extender/manifests/{pushed}" in registry.seen
    assert f"/v2/kube-scheduler/manifests/{scheduler}" in registry.seen


def test_a_private_image_and_an_unreachable_registry_are_warnings(registry: FakeRegistry) -> None:
    registry.publish("kube-scheduler", "v1.35.8")
    registry.private.add("kube-scheduler")
    spec = stack("metal")
    private = by_key(check_images(spec))["kubeSchedulerImage"]
    assert private.severity is Severity.WARNING and "refuses anonymous pulls (401)" in private.message
    nowhere = {
        "ghcr.io": "http://127.0.0.1:9",
        "registry.k8s.io": "http://127.0.0.1:9",
    }  # discard port: closed
    unreachable = by_key(check_images(spec, HttpRegistry(nowhere, timeout=2)))
    assert unreachable["extenderImage"].severity is Severity.WARNING
    assert "not checked" in unreachable["extenderImage"].message
    assert unreachable["extenderImage"].fix == (
        f"check by hand: docker buildx imagetools inspect {EXTENDER_REPOSITORY}:{PROJECT_VERSION}"
    )
    assert unreachable["kubeSchedulerImage"].severity is Severity.WARNING


def test_only_images_gpufleet_deploys_itself_are_checked() -> None:
    """A MostAllocated aws stack runs no pod of gpufleet's own (EKS's scheduler packs); FragmentationAware on aws
    runs the gpu-binpack scheduler and its extender, as the existing platform always runs the scheduler."""
    plain = parse_config(yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"], "dev")
    assert deployed_images(plain) == []
    keys = [key for key, _ in deployed_images(stack("dev"))]
    assert keys == ["gpufleet:versions.kubeSchedulerImage", "gpufleet:versions.extenderImage"]
