"""Preflight: the images gpufleet itself puts in pods exist in their registries (not the charts' images).

These are the gpu-binpack scheduler's (`registry.k8s.io/kube-scheduler`, on existing clusters and with
FragmentationAware) and the extender's (this repository's image, FragmentationAware), read from the objects the
stack compiles, so the check sees exactly what the kubelet would pull. A missing one is an ImagePullBackOff
after the deploy; a found one is reported with its digest, the pin to use.

The registry is asked as a pulling client asks it (opencontainers/distribution-spec v1.1.0 spec.md, "Pulling
manifests": ``GET /v2/<name>/manifests/<reference>``, 200 with the manifest when it exists, 404 when not; the
digest is the optional ``Docker-Content-Digest`` header, else the sha256 of the manifest served), anonymously:
a 401 with a ``WWW-Authenticate: Bearer realm=…,service=…,scope=…`` challenge is answered with a token from
that realm (distribution "Token Authentication Specification"), which is how ghcr.io serves public images;
redirects are followed (registry.k8s.io redirects to the registries behind it), and the token is sent only
where they ended. ``GPUFLEET_REGISTRY_MIRRORS`` (``host=url,…``) sends a registry's requests elsewhere, e.g.
to the mirror an air-gapped cluster pulls through.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from hashlib import sha256
from typing import Protocol

from infra.images import ImageRef, parse
from infra.preflight.findings import Finding, error, ok, warning
from infra.spec import ClusterSpec
from infra.versions import EXTENDER_REPOSITORY, PROJECT_VERSION
from scheduler.extender.manifests import CONTAINER as EXTENDER_CONTAINER

MIRRORS_ENV = "GPUFLEET_REGISTRY_MIRRORS"
MAX_MANIFEST = 4 * 1024 * 1024  # read at most this much of a manifest (more than any image manifest or index)
ACCEPT = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))  # fmt: skip
# The container of gpufleet's own Deployment -> the `gpufleet:versions` key that pins its image.
VERSION_KEYS = {"kube-scheduler": "kubeSchedulerImage", EXTENDER_CONTAINER: "extenderImage"}


@dataclass(frozen=True)
class Answer:
    status: int  # the registry's HTTP status for the manifest (0: no answer)
    digest: str = ""
    reason: str = ""  # why there was no answer


class Registry(Protocol):
    def manifest(self, ref: ImageRef) -> Answer: ...


def mirrors(text: str) -> dict[str, str]:
    """``host=url,host=url`` -> {host: url}."""
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return {host.strip(): url.strip().rstrip("/") for host, url in pairs}


def _challenge(header: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', header)) if header.lower().startswith("bearer ") else {}


class HttpRegistry:
    """Registry over HTTPS (or a mirror's URL), anonymous pull tokens, redirects followed."""

    def __init__(self, endpoints: Mapping[str, str] | None = None, timeout: float = 10) -> None:
        self.endpoints = dict(mirrors(os.environ.get(MIRRORS_ENV, "")) if endpoints is None else endpoints)
        self.timeout = timeout

    def _get(self, url: str, token: str = "") -> tuple[int, Message, str, bytes]:
        headers = {"Accept": ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers), timeout=self.timeout
            ) as r:
                return r.status, r.headers, r.geturl(), r.read(MAX_MANIFEST)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.geturl(), b""

    def _token(self, challenge: dict[str, str]) -> str:
        query = urllib.parse.urlencode({k: v for k, v in challenge.items() if k in ("service", "scope")})
        with urllib.request.urlopen(f"{challenge['realm']}?{query}", timeout=self.timeout) as reply:
            doc = json.loads(reply.read())
        return str(doc.get("token") or doc.get("access_token") or "")

    def manifest(self, ref: ImageRef) -> Answer:
        base = self.endpoints.get(ref.registry, f"https://{ref.registry}")
        try:
            status, headers, final, body = self._get(f"{base}/v2/{ref.repository}/manifests/{ref.reference}")
            challenge = _challenge(headers.get("WWW-Authenticate", ""))
            if (
                status == 401 and "realm" in challenge
            ):  # retried where the redirects ended, never sent further
                status, headers, _, body = self._get(final, self._token(challenge))
        except (OSError, ValueError) as exc:  # URLError, timeouts, a token endpoint that answers no JSON
            return Answer(0, reason=str(getattr(exc, "reason", exc)) or type(exc).__name__)
        digest = headers.get("Docker-Content-Digest") or (
            f"sha256:{sha256(body).hexdigest()}" if body else ""
        )
        return Answer(status, digest if status == 200 else "")


def deployed_images(spec: ClusterSpec) -> list[tuple[str, str]]:
    """(`gpufleet:versions` key, image) for each container of gpufleet's own Deployments the stack compiles."""
    from infra.scheduling import scheduler_inputs
    from scheduler import compile

    out = []
    for obj in compile(*scheduler_inputs(spec)):
        if obj.get("kind") != "Deployment":
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            key = VERSION_KEYS.get(container["name"], "")
            out.append((f"gpufleet:versions.{key}" if key else obj["metadata"]["name"], container["image"]))
    return out


def _fix(key: str, image: str) -> str:
    publish = ""
    if key.endswith("extenderImage") and image.startswith(f"{EXTENDER_REPOSITORY}:"):
        publish = (f"push the release's git tag (v{PROJECT_VERSION}) so .github/workflows/extender-image.yml "
                   "publishes it, or ")  # fmt: skip
    return f"{publish}set {key} to a published tag or <name>@sha256:<digest> (see docs/spec.md, versions)"


def image_finding(key: str, image: str, answer: Answer) -> Finding:
    ref = parse(image)
    if ref is None:
        return error(key, f"{image} is not an image reference", _fix(key, image))
    if answer.status == 200:
        pin = "" if ref.digest else f"; to pin it by digest: {ref.registry}/{ref.repository}@{answer.digest}"
        return ok(key, f"{image} is published ({answer.digest or 'no digest given'}){pin}")
    if answer.status == 404:
        return error(key, f"{image}: {ref.registry} has no such image, so its pods would stay in "
                     "ImagePullBackOff", _fix(key, image))  # fmt: skip
    if answer.status in (401, 403):
        return warning(key, f"{image}: {ref.registry} refuses anonymous pulls ({answer.status}), so the nodes "
                       "need credentials for it (gpufleet sets no imagePullSecrets)",
                       "make the image public, or give the nodes' container runtime pull credentials")  # fmt: skip
    why = answer.reason or f"HTTP {answer.status}"
    return warning(key, f"{image}: could not ask {ref.registry} ({why}); not checked",
                   f"check by hand: docker buildx imagetools inspect {image}")  # fmt: skip


def check_images(spec: ClusterSpec, registry: Registry | None = None) -> list[Finding]:
    """One finding per image gpufleet deploys outside its charts."""
    reader = registry or HttpRegistry()
    out = []
    for key, image in deployed_images(spec):
        ref = parse(image)
        out.append(image_finding(key, image, reader.manifest(ref) if ref else Answer(0)))
    return out
