"""Filters for Ubuntu's driver archive: which build of the pinned driver a host can install.

Canonical's pockets (noble-updates, noble-security, ...) index only the newest build of each source
package; a superseded driver build leaves the index, so `pkg=<version>-*` stops resolving on fresh hosts
once Canonical publishes a newer point release of the branch. NVIDIA's CUDA repository keeps every
version, which is why the exact pin works unchanged on Debian and RHEL.
"""

from __future__ import annotations

from typing import Any

POLICIES = ("at-least", "exact")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def _offered(madison: str, branch: str, foreign: str) -> list[str]:
    """Upstream versions of the branch in `apt-cache madison` output, newest first, foreign origin dropped."""
    found: set[str] = set()
    for line in madison.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) != 3 or (foreign and foreign in parts[2]):
            continue
        upstream = parts[1].split(":")[-1].split("-")[0]
        if upstream.startswith(branch + ".") and all(piece.isdigit() for piece in upstream.split(".")):
            found.add(upstream)
    return sorted(found, key=_key, reverse=True)


def nvidia_driver_pick(
    madison: str, installed: str, pin: str, branch: str, policy: str, foreign: str = ""
) -> dict[str, Any]:
    """{"version": upstream version to install or keep, "error": ""}, or {"version": "", "error": why}.

    exact: the pinned version itself (installed, or still offered by the archive).
    at-least: the installed build when it is of the branch and not older than the pin (no change on a
    live node); else the pin when the archive still offers it; else the archive's newest build of the
    branch that is newer than the pin. Never a version the archive no longer offers.
    """
    if policy not in POLICIES:
        return {
            "version": "",
            "error": f"nvidia_driver_archive_version_policy must be one of {POLICIES}, got {policy!r}",
        }
    offered = _offered(madison, branch, foreign)
    listing = ", ".join(offered) or "nothing"
    if not pin:
        return {"version": "", "error": ""}
    if installed == pin or pin in offered:
        return {"version": pin, "error": ""}
    if policy == "at-least":
        if installed.startswith(branch + ".") and _key(installed) >= _key(pin):
            return {"version": installed, "error": ""}
        newer = [version for version in offered if _key(version) > _key(pin)]
        if newer:
            return {"version": newer[0], "error": ""}
        return {
            "version": "",
            "error": (
                f"the distribution archive offers driver branch {branch} at {listing}; nothing is "
                f"{pin} or newer (nvidia_driver_archive_version_policy at-least)"
            ),
        }
    return {
        "version": "",
        "error": (
            f"the distribution archive no longer offers driver {pin} (it keeps only the newest build; "
            f"branch {branch} offered: {listing}). Raise versions.nvidiaDriverVersion to an offered build, or "
            "set nvidia_driver_archive_version_policy: at-least"
        ),
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_pick": nvidia_driver_pick}
