"""Kueue's visibility API on the twin, served through the real API server's aggregator without a Service address.

The chart registers `v1beta1`/`v1beta2.visibility.kueue.x-k8s.io` as APIServices backed by the Service
`kueue-visibility-server` (port 443 to the pod's 8082). Without `--enable-aggregator-routing` the aggregator
resolves an APIService's Service with `ResolveCluster` (kubernetes v1.36.4
cmd/kube-apiserver/app/server.go:293-305, `NewClusterIPServiceResolver`), which for a ClusterIP Service dials the
ClusterIP but for `type: ExternalName` builds `https://<externalName>:<the APIService's port>`
(k8s.io/apiserver v0.36.4 pkg/util/proxy/proxy.go:129-156), and the availability check skips the endpoint
lookup for anything but ClusterIP (k8s.io/kube-aggregator v0.36.4
pkg/controllers/status/remote/remote_available_controller.go:220). So on the twin the Service becomes
`ExternalName: localhost` and each APIService's port the one Kueue's visibility server listens on, on 127.0.0.1
(the configuration's `visibilityServer`, kueue@v0.19.2 pkg/visibility/server.go:152-163). The APIServices keep
the chart's `insecureSkipTLSVerify` (no cert-manager), as on the cluster.

Kueue reads the visibility server's certificate from the fixed `/visibility/tls.crt` and `tls.key` when its
internal cert management is off (pkg/visibility/server.go:68,110-116), a folder at the root the twin must not
create on the machine. Kueue runs in a root of its own instead (`in_own_root`): a tmpfs with every top-level
entry of the twin's root bound into it, plus `/visibility` with a certificate from the twin's CA.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from scheduler.labels import KUEUE_NAMESPACE
from twin.kubectl import Kubectl
from twin.pki import CertificateAuthority

SERVICE = "kueue-visibility-server"
CERT_DIR = "/visibility"  # kueue@v0.19.2 pkg/visibility/server.go:68, certDir
EXTERNAL_NAME = "localhost"


def visibility_for_loopback(objects: list[dict[str, Any]], port: int) -> list[dict[str, Any]]:
    """The chart's objects with the visibility Service as `ExternalName: localhost` and every visibility
    APIService sending to `port` (where Kueue's visibility server listens on 127.0.0.1)."""
    out = []
    for obj in objects:
        if obj["kind"] == "Service" and obj["metadata"]["name"] == SERVICE:
            obj = copy.deepcopy(obj)
            spec = {k: v for k, v in obj["spec"].items() if k not in ("selector", "clusterIP", "clusterIPs")}
            obj["spec"] = {**spec, "type": "ExternalName", "externalName": EXTERNAL_NAME}
        elif obj["kind"] == "APIService" and (obj["spec"].get("service") or {}).get("name") == SERVICE:
            obj = copy.deepcopy(obj)
            obj["spec"]["service"]["port"] = port
        out.append(obj)
    return out


def visibility_available(kubectl: Kubectl) -> bool:
    """Every visibility APIService `Available`: the aggregator reached Kueue's visibility server."""
    services = json.loads(kubectl.run("get", "apiservices", "-o", "json"))["items"]
    ours = [s for s in services if (s["spec"].get("service") or {}).get("name") == SERVICE]
    return bool(ours) and all(
        any(
            c["type"] == "Available" and c["status"] == "True"
            for c in s.get("status", {}).get("conditions", [])
        )
        for s in ours
    )


def visibility_certificate(ca: CertificateAuthority, folder: Path) -> Path:
    """The visibility server's serving certificate (tls.crt/tls.key in `folder`), for localhost and the Service."""
    folder.mkdir(parents=True, exist_ok=True)
    pair = ca.issue("kueue-visibility", SERVICE, ips=("127.0.0.1",),
                    dns=(EXTERNAL_NAME, f"{SERVICE}.{KUEUE_NAMESPACE}.svc"), server=True)  # fmt: skip
    (folder / "tls.crt").write_bytes(pair.cert.read_bytes())
    (folder / "tls.key").write_bytes(pair.key.read_bytes())
    return folder


# $0: the new root's folder, $1: the certificate folder, then the command. Symlinks at the top (bin -> usr/bin)
# are copied, folders bound recursively (their own mounts, /proc and the twin's /etc overlay, come along); a
# folder that cannot be bound (an automount, say) is left out, and Kueue names any file it then misses.
OWN_ROOT = """set -e
root=$0; certs=$1; shift
mount -t tmpfs tmpfs "$root"
for entry in /*; do
  name=${entry#/}
  if [ -L "$entry" ]; then ln -s "$(readlink "$entry")" "$root/$name"
  elif [ -d "$entry" ]; then mkdir "$root/$name"; mount --rbind "$entry" "$root/$name" || rmdir "$root/$name"
  fi
done
mkdir -p "$root/visibility"
cp "$certs/tls.crt" "$certs/tls.key" "$root/visibility/"
exec chroot "$root" "$@"
"""


def in_own_root(argv: list[str], root: Path, certs: Path) -> list[str]:
    """`argv` in a mount namespace of its own whose root is the twin's plus `/visibility` holding `certs`."""
    root.mkdir(parents=True, exist_ok=True)
    script = ["sh", "-c", OWN_ROOT, str(root), str(certs)]
    return ["unshare", "--mount", "--propagation", "private", "--", *script, *argv]
