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

# Stub nvidia-ctk modelling toolkit 1.18+ (nvidia-container-toolkit v1.20.0, cmd/nvidia-ctk/runtime/configure/
# configure.go): `runtime configure` writes the nvidia runtime into a drop-in (/etc/containerd/conf.d/99-nvidia.toml,
# /etc/crio/crio.conf.d/99-nvidia.toml) and adds the drop-in directory to the main config's `imports`
# (configure_test.go "containerd: v2 config does not exist with drop-in"); docker has no drop-in and gets
# daemon.json. `--enable-cdi` sets enable_cdi in the CRI plugin. `config --in-place` writes the default
# config.toml the packages' postinst writes (api/config/v1/toml_test.go "defaultConfig": the
# accept-nvidia-visible-devices-envvar-when-unprivileged key is present, commented out).
NVIDIA_CTK = f"""#!/bin/sh
set -eu
log="${{NVIDIA_CTK_LOG:-{NVIDIA_CTK_LOG}}}"
mkdir -p "$(dirname "$log")"
echo "$*" >> "$log"
while [ "${{1:-}}" = --quiet ] || [ "${{1:-}}" = --debug ]; do shift; done
case "${{1:-}} ${{2:-}}" in
  "config "*)
    path=/etc/nvidia-container-runtime/config.toml
    for arg in "$@"; do case "$arg" in --config-file=*) path="${{arg#--config-file=}}" ;; esac; done
    mkdir -p "$(dirname "$path")"
    [ -e "$path" ] || cat > "$path" <<'TOML'
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
environment = []
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]
TOML
    exit 0 ;;
  "cdi generate")
    for arg in "$@"; do case "$arg" in --output=*) out="${{arg#--output=}}" ;; esac; done
    mkdir -p "$(dirname "$out")"
    printf 'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n' > "$out"
    exit 0 ;;
  "runtime configure") ;;
  *) exit 0 ;;
esac
runtime=containerd config="" dropin="" cdi=""
for arg in "$@"; do
  case "$arg" in
    --runtime=*) runtime="${{arg#--runtime=}}" ;;
    --config=*) config="${{arg#--config=}}" ;;
    --drop-in-config=*) dropin="${{arg#--drop-in-config=}}" ;;
    --enable-cdi|--cdi.enabled) cdi=1 ;;
  esac
done
case "$runtime" in
  docker)
    config="${{config:-/etc/docker/daemon.json}}"
    mkdir -p "$(dirname "$config")"
    python3 - "$config" <<'PY'
import json, os, sys
path = sys.argv[1]
config = json.load(open(path)) if os.path.exists(path) else {{}}
config.setdefault("runtimes", {{}})["nvidia"] = {{"args": [], "path": "nvidia-container-runtime"}}
json.dump(config, open(path, "w"), indent=4)
PY
    ;;
  crio)
    dropin="${{dropin:-/etc/crio/crio.conf.d/99-nvidia.toml}}"
    mkdir -p "$(dirname "$dropin")"
    cat > "$dropin" <<'TOML'
[crio.runtime.runtimes.nvidia]
  runtime_path = "/usr/bin/nvidia-container-runtime"
  runtime_type = "oci"
TOML
    ;;
  *)
    config="${{config:-/etc/containerd/config.toml}}"
    dropin="${{dropin:-/etc/containerd/conf.d/99-nvidia.toml}}"
    mkdir -p "$(dirname "$dropin")" "$(dirname "$config")"
    [ -e "$config" ] || printf 'version = 2\n' > "$config"
    grep -q '^imports' "$config" || {{ printf 'imports = ["%s/*.toml"]\n' "$(dirname "$dropin")"; cat "$config"; }} > "$config.new"
    [ -e "$config.new" ] && mv "$config.new" "$config"
    {{
      echo 'version = 2'
      echo '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]'
      echo '  runtime_type = "io.containerd.runc.v2"'
      echo '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]'
      echo '  BinaryName = "/usr/bin/nvidia-container-runtime"'
      if [ -n "$cdi" ]; then echo '[plugins."io.containerd.grpc.v1.cri"]'; echo '  enable_cdi = true'; fi
    }} > "$dropin"
    ;;
esac
"""

# Stub nvidia-smi: fails like the real one when no driver is loaded, otherwise answers the verify role's query
# with one L40S in the format of the recorded samples (tests/ansible/data/nvidia-smi/l40s-4gpu.csv), and
# `-q` with that GPU's block cut to the header and its Fabric section, in the layout of nvidia-smi 550+
# (Fabric: State, Status, CliqueId, ClusterUUID, Health; NVML nvmlGpuFabricInfo_t; sample
# tests/ansible/data/nvidia-smi/h100-fabric-q.txt). The fabric State and Status are "N/A" (an L40S has no
# fabric) unless NVIDIA_SMI_FABRIC (two lines: State, Status) says otherwise. GPUFLEET_STUB_ROOT prefixes both
# paths, so the stub also answers on the build machine.
NVIDIA_SMI_FABRIC = "/var/lib/gpufleet-stub/fabric"
NVIDIA_SMI = """#!/bin/sh
root="${{GPUFLEET_STUB_ROOT:-}}"
[ -e "$root/sys/module/nvidia/version" ] || {{
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2; exit 9; }}
if [ "${{1:-}}" = -q ]; then
  state=N/A status=N/A
  if [ -r "$root{fabric}" ]; then state=$(sed -n 1p "$root{fabric}"); status=$(sed -n 2p "$root{fabric}"); fi
  cat <<EOF

==============NVSMI LOG==============

Timestamp                                 : Mon Jan  5 10:00:00 2026
Driver Version                            : {version}
CUDA Version                              : 13.0

Attached GPUs                             : 1
GPU 00000000:01:00.0
    Product Name                          : NVIDIA L40S
    Product Brand                         : NVIDIA
    Persistence Mode                      : Enabled
    Fabric
        State                             : $state
        Status                            : $status
        CliqueId                          : N/A
        ClusterUUID                       : N/A
        Health
            Bandwidth                     : N/A
    Processes                             : None

EOF
  exit 0
fi
echo "index, name, driver_version, persistence_mode, ecc.mode.current, mig.mode.current, memory.total [MiB], pci.bus_id"
echo "0, NVIDIA L40S, {version}, Enabled, Enabled, [N/A], 46068 MiB, 00000000:01:00.0"
"""

# Stub modprobe for the run on a "fresh host" (neither nvidia nor nouveau loaded): records the call and makes the
# module appear in sysfs with the installed driver's version and in /proc/modules, as loading the real one does.
MODPROBE_LOG = "/var/log/gpufleet-stub/modprobe.calls"
MODPROBE = f"""#!/bin/sh
mkdir -p "$(dirname {MODPROBE_LOG})"
echo "$*" >> {MODPROBE_LOG}
for name in "$@"; do
  case "$name" in
    -*) ;;
    nvidia)
      [ -w /proc/modules ] && echo "nvidia 0 0 - Live 0x0" >> /proc/modules
      mkdir -p /sys/module/nvidia
      dpkg-query --show --showformat='${{Version}}' nvidia-smi | sed 's/-.*//' > /sys/module/nvidia/version ;;
    *) mkdir -p "/sys/module/$name" ;;
  esac
done
"""

# Postinst of nvidia-container-toolkit-base (packaging/debian/nvidia-container-toolkit-base.postinst, v1.20.0).
TOOLKIT_BASE_POSTINST = """#!/bin/sh
set -e
[ "$1" = configure ] && /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
exit 0
"""

# Ubuntu's nvidia-persistenced unit starts the daemon without persistence mode; NVIDIA's driver role overrides it
# (NVIDIA/ansible-role-nvidia-driver, files/nvidia-persistenced-override.conf).
PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""

# What a host that followed NVIDIA's cuda-keyring instructions has: cuda-keyring 1.1-1 installs the keyring and a
# one-line entry `deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] <repo>/ /`
# (gpu-driver-container ubuntu22.04/install.sh setup_cuda_repo installs that package).
CUDA_KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
CUDA_KEYRING_LIST = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"


def _deb(
    out: Path,
    name: str,
    version: str,
    depends: str = "",
    files: dict[str, str] | None = None,
    postinst: str = "",
) -> None:
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
    if postinst:
        (tree / "DEBIAN/postinst").write_text(postinst)
        (tree / "DEBIAN/postinst").chmod(0o755)
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
    _deb(
        out,
        "nvidia-container-toolkit-base",
        version,
        files={
            "/usr/bin/nvidia-ctk": NVIDIA_CTK,
            # The CDI refresh units the base package ships from 1.18 (nvidia-container-toolkit-base.install).
            "/lib/systemd/system/nvidia-cdi-refresh.service": "[Service]\nType=oneshot\n"
            "ExecStart=/usr/bin/nvidia-ctk cdi generate\n",
            "/lib/systemd/system/nvidia-cdi-refresh.path": "[Path]\nPathChanged=/usr/bin/nvidia-ctk\n",
        },
        postinst=TOOLKIT_BASE_POSTINST,
    )
    _deb(
        out,
        "nvidia-container-toolkit",
        version,
        f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (>= {version})",
    )


def _driver_packages(out: Path, version: str) -> None:
    """NVIDIA's CUDA repository for Debian 12 at one driver version (Debian-style package names; the
    compute-only set from NVIDIA's driver installation guide: nvidia-driver-cuda + the kernel module)."""
    _deb(out, "libcuda1", version)
    upstream = version.split("-")[0]
    _deb(
        out,
        "nvidia-smi",
        version,
        files={"/usr/bin/nvidia-smi": NVIDIA_SMI.format(version=upstream, fabric=NVIDIA_SMI_FABRIC)},
    )
    _deb(
        out,
        "nvidia-persistenced",
        version,
        files={"/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT},
    )
    _deb(out, "firmware-nvidia-gsp", version)
    for module in ("nvidia-kernel-open-dkms", "nvidia-kernel-dkms"):
        _deb(out, module, version, f"firmware-nvidia-gsp (= {version})")
    _deb(out, "nvidia-driver-cuda", version, f"nvidia-smi (= {version}), libcuda1 (= {version})")
    # From branch 580 Fabric Manager and NSCQ carry no branch in their names (gpu-driver-container
    # ubuntu22.04/install.sh fabricmanager_install / nscq_install; rhel9/precompiled/Dockerfile).
    _deb(out, "nvidia-fabricmanager", version)
    _deb(out, "libnvidia-nscq", version)


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


def build(srv: Path, toolkit_versions: list[str], driver_versions: list[str]) -> str:
    """Write srv/toolkit and srv/cuda: flat, signed repositories with a `gpgkey` next to them.

    srv/cuda models NVIDIA's CUDA repository for Debian 12: the driver and Fabric Manager (580-style
    names) at every version of driver_versions; the roles must pick the pinned one. Returns the
    fingerprint of the signing key.
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
        toolkit, cuda = srv / "toolkit", srv / "cuda"
        toolkit.mkdir(parents=True)
        cuda.mkdir(parents=True)
        for version in toolkit_versions:
            _toolkit_packages(toolkit, version)
        for version in driver_versions:
            _driver_packages(cuda, version)
        _index_and_sign(toolkit, gnupghome)
        _index_and_sign(cuda, gnupghome)
        binary = subprocess.run(["gpg", "--batch", "--export"], env=env, check=True, capture_output=True)
        (cuda / "keyring.gpg").write_bytes(binary.stdout)
        colons = subprocess.run(
            ["gpg", "--batch", "--with-colons", "--list-keys"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        return next(line.split(":")[9] for line in colons.stdout.splitlines() if line.startswith("fpr:"))
    finally:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
        shutil.rmtree(gnupghome, ignore_errors=True)
