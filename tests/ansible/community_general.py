"""community.general for the Ansible tests, taken from the `ansible` wheel on PyPI at test time.

Only ansible_collections/community/general is extracted (the roles use kernel_blacklist, modprobe,
dnf_versionlock and the chroot connection); nothing of it is committed.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.ansible.debroot import cache_dir

# The `ansible` community package release that matches ansible-core 2.19 (ansible 12.x).
ANSIBLE_PACKAGE_VERSION = "12.3.0"
_PREFIX = "ansible_collections/community/general/"


def ansible_wheel() -> Path:
    """The cached `ansible` wheel, downloaded with pip on first use."""
    target = cache_dir() / "ansible-wheel"
    wheels = sorted(target.glob(f"ansible-{ANSIBLE_PACKAGE_VERSION}-*.whl"))
    if not wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(target),
                f"ansible=={ANSIBLE_PACKAGE_VERSION}",
            ],
            check=True,
        )
        wheels = sorted(target.glob(f"ansible-{ANSIBLE_PACKAGE_VERSION}-*.whl"))
    return wheels[0]


def extract_community_general(dest: Path) -> Path:
    """Extract community.general into dest (a collections path) and return dest."""
    with zipfile.ZipFile(ansible_wheel()) as wheel:
        members = [name for name in wheel.namelist() if name.startswith(_PREFIX)]
        wheel.extractall(dest, members)
    return dest
