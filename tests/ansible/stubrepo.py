"""Signed local apt repositories of stub NVIDIA packages for the real-run test.

NVIDIA's repositories are out of reach, so the test serves the package names, versions and dependency
shape the roles rely on from `file:` repositories inside the throwaway root. The stub `nvidia-ctk`
records every call and edits the runtime config the way the real one does, so the idempotence of the
"configure only when missing" logic is tested for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

NVIDIA_CTK_LOG = "/var/log/gpufleet-stub/nvidia-ctk.calls"

NVIDIA_CTK = f"""#!/bin/sh
# Stub nvidia-ctk: records its arguments, registers the nvidia runtime like the real tool.
set -eu
log="${{NVIDIA_CTK_LOG:-{NVIDIA_CTK_LOG}}}"
mkdir -p "$(dirname "$log")"
echo "$*" >> "$log"
[ "${{1:-}}" = runtime ] && [ "${{2:-}}" = configure ] || exit 0
runtime=containerd
config=/etc/containerd/config.toml
for arg in "$@"; do
  case "$arg" in
    --runtime=*) runtime="${{arg#--runtime=}}" ;;
    --config=*) config="${{arg#--config=}}" ;;
  esac
done
mkdir -p "$(dirname "$config")"
case "$runtime" in
  docker)
    python3 - "$config" <<'PY'
import json, os, sys
path = sys.argv[1]
config = json.load(open(path)) if os.path.exists(path) else {{}}
config.setdefault("runtimes", {{}})["nvidia"] = {{"args": [], "path": "nvidia-container-runtime"}}
json.dump(config, open(path, "w"), indent=4)
PY
    ;;
  crio)
    cat >> "$config" <<'TOML'
[crio.runtime.runtimes.nvidia]
  runtime_path = "/usr/bin/nvidia-container-runtime"
  runtime_type = "oci"
TOML
    ;;
  *)
    cat >> "$config" <<'TOML'
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
TOML
    ;;
esac
"""


def _deb(out: Path, name: str, version: str, depends: str = "", files: dict[str, str] | None = None) -> None:
    tree = Path(tempfile.mkdtemp(dir=out.parent))
    (tree / "DEBIAN").mkdir()
    control = [
        f"Package: {name}",
        f"Version: {version}",
        "Architecture: all",
        "Maintainer: gpufleet tests <t@example.invalid>",
    ]
    if depends:
        control.append(f"Depends: {depends}")
    control.append(f"Description: stub of {name} for gpufleet tests")
    (tree / "DEBIAN/control").write_text("\n".join(control) + "\n")
    for path, content in (files or {}).items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(0o755)
    subprocess.run(
        [
            "dpkg-deb",
            "--root-owner-group",
            "-Zgzip",
            "--build",
            str(tree),
            str(out / f"{name}_{version}_all.deb"),
        ],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(tree)


def _toolkit_packages(out: Path, version: str) -> None:
    _deb(out, "libnvidia-container1", version)
    _deb(out, "libnvidia-container-tools", version, f"libnvidia-container1 (>= {version})")
    _deb(out, "nvidia-container-toolkit-base", version, files={"/usr/bin/nvidia-ctk": NVIDIA_CTK})
    _deb(
        out,
        "nvidia-container-toolkit",
        version,
        f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (>= {version})",
    )


def _index_and_sign(repo: Path, gnupghome: Path) -> None:
    env = {**os.environ, "GNUPGHOME": str(gnupghome)}
    packages = subprocess.run(
        ["apt-ftparchive", "packages", "."], cwd=repo, check=True, capture_output=True, text=True
    )
    (repo / "Packages").write_text(packages.stdout)
    release = subprocess.run(
        ["apt-ftparchive", "release", "."], cwd=repo, check=True, capture_output=True, text=True
    )
    (repo / "Release").write_text(release.stdout)
    subprocess.run(
        ["gpg", "--batch", "--yes", "--clearsign", "-o", "InRelease", "Release"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    key = subprocess.run(["gpg", "--batch", "--armor", "--export"], env=env, check=True, capture_output=True)
    (repo / "gpgkey").write_bytes(key.stdout)


def build(srv: Path, toolkit_versions: list[str], fabricmanager: tuple[str, list[str]]) -> None:
    """Write srv/toolkit and srv/fabricmanager: flat, signed repositories with a `gpgkey` next to them.

    fabricmanager is (branch, [package versions]); the roles must pick the one matching the driver.
    """
    gnupghome = Path(tempfile.mkdtemp(prefix="gpg"))
    env = {**os.environ, "GNUPGHOME": str(gnupghome)}
    try:
        subprocess.run(
            [
                "gpg",
                "--batch",
                "--passphrase",
                "",
                "--quick-gen-key",
                "gpufleet test repository",
                "ed25519",
                "sign",
                "never",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        toolkit, fabric = srv / "toolkit", srv / "fabricmanager"
        toolkit.mkdir(parents=True)
        fabric.mkdir(parents=True)
        for version in toolkit_versions:
            _toolkit_packages(toolkit, version)
        branch, versions = fabricmanager
        for version in versions:
            _deb(fabric, f"nvidia-fabricmanager-{branch}", version)
        _index_and_sign(toolkit, gnupghome)
        _index_and_sign(fabric, gnupghome)
    finally:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
        shutil.rmtree(gnupghome, ignore_errors=True)
