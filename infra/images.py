"""Container image references: the grammar, and how a pin from `gpufleet:versions` becomes the reference deployed.

The grammar is distribution/reference v0.6.0 (`reference.go`, `regexp.go`): ``name [":" tag] ["@" digest]``,
a name's first component being its registry when it contains a "." or a ":" or is ``localhost``
(`normalize.go` ``splitDockerDomain``). Digests are accepted as ``sha256:<64 lowercase hex>`` only, the
algorithm the OCI image spec requires registries to support (image-spec v1.1 `descriptor.md`, "Registered
algorithms"). When both are given the digest decides what is pulled (the tag is kept for the reader).

A pin is either a tag of the component's own repository (``0.1.0``, ``v1.35.8``, optionally with a digest:
``v1.35.8@sha256:…``) or, where the component allows it, a whole reference used verbatim
(``ghcr.io/owner/gpufleet-extender@sha256:…``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"  # Go's ASCII \w (Python's \w is Unicode)
DIGEST = r"sha256:[a-f0-9]{64}"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{TAG}))?(?:@(?P<digest>{DIGEST}))?")
PIN = re.compile(rf"(?P<tag>{TAG})(?:@(?P<digest>{DIGEST}))?")
DOCKER_HUB = "docker.io"


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference: the registry host, the repository path on it, and the tag and/or digest."""

    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def reference(self) -> str:
        """What the registry's manifest endpoint takes: the digest when pinned, otherwise the tag."""
        return self.digest or self.tag

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.registry}/{self.repository}{tag}{digest}"


def parse(image: str) -> ImageRef | None:
    """The reference ``image`` names, or None when it is not a valid reference with a tag or a digest."""
    match = REFERENCE.fullmatch(image)
    if match is None or not (match["tag"] or match["digest"]):
        return None
    first, _, rest = match["name"].partition("/")
    if rest and (first == "localhost" or any(c in first for c in ".:")):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, match["name"] if rest else f"library/{match['name']}"
    return ImageRef(registry, repository, match["tag"] or "", match["digest"] or "")


def pin_problem(pin: str, *, whole_reference: bool) -> str | None:
    """Why ``pin`` is not a pin (a tag, a tag with a digest, or with ``whole_reference`` an image reference
    with a tag or digest); never ``latest``. None when it is one."""
    if re.fullmatch(DIGEST, pin):
        return f"{pin!r} is a bare digest: write it after a tag (<tag>@{pin[:15]}…) or a name (<name>@…)"
    tag_pin = PIN.fullmatch(pin)
    ref = parse(pin) if whole_reference and tag_pin is None else None
    tag = tag_pin["tag"] if tag_pin else (ref.tag if ref else None)
    if tag is None:
        accepted = "a tag such as 0.1.0, tag@sha256:<digest>"
        if whole_reference:
            accepted += ", or an image reference such as ghcr.io/owner/name@sha256:<digest>"
        return f"{pin!r} is not a pinned image ({accepted}; digests are sha256 with 64 lowercase hex digits)"
    if tag == "latest":
        return f"{pin!r} is not pinned: never latest (a release tag, or a digest)"
    return None


def resolve(repository: str, pin: str) -> str:
    """The reference deployed for ``pin``: a tag (with or without digest) of ``repository``, or ``pin`` itself
    when it is a whole reference (used verbatim, so a digest pin is exactly what the kubelet pulls)."""
    return f"{repository}:{pin}" if PIN.fullmatch(pin) else pin
