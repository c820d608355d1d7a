"""Throwaway Debian 12 roots for real Ansible runs, built once with debootstrap and cached as a tarball.

Building a root takes minutes and needs the network; extracting the cached tarball takes seconds, so the
real-run test pays the debootstrap price once per machine (the cache key covers everything that goes in).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

SUITE = "bookworm"
MIRROR = os.environ.get("GPUFLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# What Ansible needs on the target (python3, python3-apt for the apt module) and what postinst scripts expect.
# No gpg: minimal images (debootstrap minbase, Ubuntu cloud-minimal, container bases) ship only gpgv, which
# apt needs; the roles install gnupg themselves before checking repository keys with gpg.
INCLUDE = ("python3", "python3-apt", "ca-certificates", "kmod", "initramfs-tools")
# Downloaded into the root's apt cache (not installed), so the roles' own `apt: gnupg` works without network.
PREFETCH = ("gnupg",)
# Rebuild a cached root after this long, so it follows Debian's point releases.
MAX_AGE_DAYS = 7
# Host tools the fixtures need and the Debian package that ships each one.
HOST_TOOLS = {"debootstrap": "debootstrap", "apt-ftparchive": "apt-utils", "gpg": "gnupg", "dpkg-deb": "dpkg"}


class HostToolMissing(RuntimeError):
    """A tool the real-run test needs is missing and cannot be installed here."""


class RootBuildFailed(RuntimeError):
    """debootstrap (or the driver prefetch) failed; carries the command's error output."""


def remove_tree(path: Path) -> None:
    """rm -rf that never crosses into another file system (a /proc or /sys left mounted in a root)."""
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


def cache_dir() -> Path:
    """Cache root: $GPUFLEET_CACHE, else $XDG_CACHE_HOME/gpufleet, else ~/.cache/gpufleet."""
    if env := os.environ.get("GPUFLEET_CACHE"):
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpufleet"


def ensure_host_tools() -> None:
    """Install missing host tools with apt-get when running as root; otherwise explain what to install."""
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise HostToolMissing(
            f"the real Ansible run needs Debian packages {missing} (apt-get install {' '.join(missing)}) "
            "and root (debootstrap and chroot); run the test as root on a Debian/Ubuntu machine"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def _key(extra: tuple[str, ...] = ()) -> str:
    material = json.dumps([SUITE, MIRROR, INCLUDE, PREFETCH, 4, *([list(extra)] if extra else [])])
    return hashlib.sha256(material.encode()).hexdigest()[:12]


def _chroot(root: Path, *argv: str) -> str:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    done = subprocess.run(["chroot", str(root), *argv], check=True, env=env, capture_output=True, text=True)
    return done.stdout


def _build(work: Path, extra: tuple[str, ...] = ()) -> dict[str, str]:
    root = work / "root"
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITE, str(root), MIRROR],
        check=True,
        capture_output=True,
    )
    # The apt index of Debian's own archive, so the roles' "refresh the system apt index" step finds it
    # fresh (inside its cache validity window) and needs no network during the test.
    _chroot(root, "apt-get", "update", "-qq")
    _chroot(root, "apt-get", "install", "--download-only", "-y", "-qq", *PREFETCH, *extra)
    return {"suite": SUITE}


def root_tarball(extra: tuple[str, ...] = ()) -> tuple[Path, dict[str, str]]:
    """Return the cached root tarball and its facts, building it when missing. `extra`: Debian packages
    downloaded into the root's apt cache too (not installed), so roles that install them need no network."""
    ensure_host_tools()
    base = cache_dir() / "debroot"
    name = f"{SUITE}-{_key(extra)}" + ("-extra" if extra else "")
    tarball, facts_file = base / f"{name}.tar", base / f"{name}.json"
    fresh = tarball.exists() and time.time() - tarball.stat().st_mtime < MAX_AGE_DAYS * 86400
    if fresh and facts_file.exists():
        return tarball, json.loads(facts_file.read_text())
    base.mkdir(parents=True, exist_ok=True)
    work = base / f"build-{os.getpid()}"
    remove_tree(work)
    try:
        try:
            facts = _build(work, extra)
        except subprocess.CalledProcessError as failed:
            output = (failed.stderr or b"")[-2000:]
            text = output.decode(errors="replace") if isinstance(output, bytes) else output
            raise RootBuildFailed(
                f"building the Debian {SUITE} root from {MIRROR} failed: {failed.cmd}\n{text}"
            ) from None
        partial = tarball.with_suffix(f".partial-{os.getpid()}")
        with tarfile.open(partial, "w") as tar:
            tar.add(work / "root", arcname=".")
        partial.rename(tarball)
        facts_file.write_text(json.dumps(facts))
        for stale in base.glob(f"{SUITE}-*"):  # roots of older keys or builds (of the same kind)
            same_kind = stale.stem.endswith("-extra") == bool(extra)
            if (
                same_kind
                and stale not in (tarball, facts_file)
                and ".partial-" not in stale.name
                and stale.is_file()
            ):
                stale.unlink()
    finally:
        remove_tree(work)
    return tarball, facts


def extract(tarball: Path, dest: Path) -> None:
    """Unpack a cached root (tar keeps device nodes, owners and modes because we run as root)."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xf", str(tarball), "-C", str(dest), "--numeric-owner"], check=True)
