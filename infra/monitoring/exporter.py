"""Which dcgm-exporter each platform runs, how gpufleet configures it, and what its per-pod series mean there.

dcgm-exporter labels a GPU's series with the pod holding it (its Kubernetes pod mapping). How it does that
depends on the release and on what its DaemonSet gives it (`infra.versions.DCGM_EXPORTER_RELEASES`, read from
internal/pkg/transformation/kubernetes.go at each tag), and four behaviours follow:

- **per-process** (`KUBERNETES_VIRTUAL_GPUS` on a release with per-process values, with an API token and the
  host's PID namespace): a pod's `DCGM_FI_DEV_GPU_UTIL`/`FB_USED` is its own processes' share of the GPU,
  beside the GPU's own pod-less series; other fields are copied to every pod holding the GPU; free GPUs keep
  their series;
- **unmapped-zero** (the same, without the token or the host PIDs): no process maps to a pod, so every pod's
  `GPU_UTIL` reads 0 however busy the GPU (R1: the GPU operator's default DaemonSet has neither);
- **device-copy** (`KUBERNETES_VIRTUAL_GPUS` on a release without per-process values, 4.5.2-4.8.1): every pod
  holding a GPU gets a copy of the GPU's series with the GPU's whole value, and once any GPU of the node is
  held the series of every free GPU is dropped (R4);
- **one-pod** (no `KUBERNETES_VIRTUAL_GPUS`, any release): each GPU's series carries one pod, the last the
  kubelet lists for it; a time-sliced GPU's other pods have no series; free GPUs keep theirs.

The stacks deploy only per-process or one-pod (`deployment`): per-process where time-sliced pools need a
series per sharing pod and the release can give one, one-pod everywhere else. On aws the exporter is pinned
to the node monitoring add-on's DCGM (4.5.2-4.8.1, no per-process values), so aws runs one-pod. The twin's
stand-in (`twin.dcgm`) plays all four from a DaemonSet's image, environment, token and `hostPID`
(`deployment_of`), so tests can show each.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from infra.spec import ClusterSpec
from infra.versions import DCGM_EXPORTER_RELEASES, GPU_OPERATOR_DCGM_EXPORTER, exporter_release
from scheduler.labels import SHARED_GPU_RESOURCE

VIRTUAL_GPUS = "KUBERNETES_VIRTUAL_GPUS"
POD_UID_ENV = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"  # what the operator sets for enablePodUID


class Mapping(StrEnum):
    PER_PROCESS = "per-process"
    UNMAPPED_ZERO = "unmapped-zero"
    DEVICE_COPY = "device-copy"
    ONE_POD = "one-pod"


# What a pod's DCGM_FI_DEV_GPU_UTIL means under each behaviour (docs/operations.md, "What is watched").
MEANING: dict[Mapping, str] = {
    Mapping.PER_PROCESS: "its own processes' share of the GPU, beside the GPU's own pod-less series",
    Mapping.UNMAPPED_ZERO: "0 whatever the GPU does (no process can be mapped to a pod)",
    Mapping.DEVICE_COPY: "the whole GPU's value, copied to every pod sharing it; free GPUs lose their series",
    Mapping.ONE_POD: "the whole GPU's value, on one pod per GPU (a time-sliced GPU's other pods have none)",
}
# Behaviours no stack may deploy: one lies about busy pods, the other hides free GPUs from the health alerts.
BROKEN = frozenset({Mapping.UNMAPPED_ZERO, Mapping.DEVICE_COPY})


@dataclass(frozen=True)
class Deployment:
    """What an exporter DaemonSet runs, as far as its pod mapping is concerned."""

    release: str  # `4.5.2-4.8.1`; "" when not known
    virtual_gpus: bool  # KUBERNETES_VIRTUAL_GPUS=true
    api_token: bool  # a service-account token is mounted: pod UIDs from the API server
    host_pid: bool  # the host's PID namespace: /proc/<pid>/cgroup of the GPU's processes

    @property
    def mapping(self) -> Mapping | None:
        """The behaviour this deployment gets (None: a release the table does not know)."""
        if not self.virtual_gpus:
            return Mapping.ONE_POD
        release = DCGM_EXPORTER_RELEASES.get(self.release)
        if release is None:
            return None
        if not release.per_process:
            return Mapping.DEVICE_COPY
        return Mapping.PER_PROCESS if self.api_token and self.host_pid else Mapping.UNMAPPED_ZERO


def image_tag(spec: ClusterSpec) -> str | None:
    """The dcgm-exporter image tag the stack's exporter runs: the EKS pin on aws, else the GPU operator chart's
    default (None for a chart the table does not know)."""
    if spec.platform == "aws":
        return spec.versions.eks_dcgm_exporter
    return GPU_OPERATOR_DCGM_EXPORTER.get(spec.versions.gpu_operator_chart)


def time_sliced(spec: ClusterSpec) -> bool:
    return any(pool.sharing.time_slicing for pool in spec.node_pools)


def deployment(spec: ClusterSpec) -> Deployment | None:
    """What the stack configures: per-process (with the token and host PIDs it needs) only where time-sliced
    pools need a series per sharing pod and the release keeps free GPUs and reports per process; one-pod
    otherwise. None when the cluster's own GPU operator runs the exporter (`addons.gpuOperator: existing`):
    gpufleet does not configure it."""
    if spec.platform == "existing" and spec.cluster.addons.gpu_operator == "existing":
        return None
    tag = image_tag(spec)
    release = exporter_release(tag) if tag else ""
    known = DCGM_EXPORTER_RELEASES.get(release)
    per_process = bool(known and known.per_process and known.keeps_free_gpus and time_sliced(spec))
    return Deployment(release, virtual_gpus=per_process, api_token=per_process, host_pid=per_process)


def deployed_mapping(spec: ClusterSpec) -> Mapping | None:
    found = deployment(spec)
    return found.mapping if found else None


def env(spec: ClusterSpec) -> list[dict[str, str]]:
    """dcgm-exporter's pod mapping (pkg/cmd/app.go flags and their environment variables):
    - DCGM_EXPORTER_KUBERNETES: GPU series carry the namespace/pod/container holding the GPU (kubelet
      pod-resources API);
    - NVIDIA_RESOURCE_NAMES: the mapper keeps only devices of `nvidia.com/gpu`, `nvidia.com/mig-*` and the names
      listed here (kubernetes.go, resource filter); time-sliced GPUs are advertised as `nvidia.com/gpu.shared`.
      Set on every cluster: it only widens the filter, and a name no device plugin advertises matches nothing;
    - KUBERNETES_VIRTUAL_GPUS: only for the per-process deployment (`deployment`)."""
    out = [
        {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
        {"name": "NVIDIA_RESOURCE_NAMES", "value": SHARED_GPU_RESOURCE},
    ]
    found = deployment(spec)
    if found is not None and found.virtual_gpus:
        out.append({"name": VIRTUAL_GPUS, "value": "true"})
    return out


def operator_values(spec: ClusterSpec) -> dict[str, Any]:
    """The ClusterPolicy fields the per-process deployment needs (GPU operator v26.7.0): `enablePodUID` makes the
    operator mount the exporter's token and grant it `get/list/watch pods` (controllers/object_controls.go:1885-
    1898, the read-pods ClusterRole gated at :458-462), `hostPID` gives it the host's PID namespace (:1851-1853);
    both are values of the chart (deployments/gpu-operator/values.yaml:308,320; templates/clusterpolicy.yaml:
    571-573,583-585)."""
    found = deployment(spec)
    if found is None or not found.virtual_gpus:
        return {}
    return {"enablePodUID": True, "hostPID": True}


def deployment_of(daemonset: dict[str, Any]) -> Deployment:
    """What an exporter DaemonSet object runs: its image tag, environment, token and PID namespace."""
    pod = daemonset.get("spec", {}).get("template", {}).get("spec", {})
    container = (pod.get("containers") or [{}])[0]
    values = {e.get("name"): str(e.get("value", "")) for e in container.get("env") or []}
    image = str(container.get("image", ""))
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
    return Deployment(
        release=exporter_release(tag) if tag else "",
        virtual_gpus=values.get(VIRTUAL_GPUS, "").lower() == "true",
        api_token=pod.get("automountServiceAccountToken") is not False,
        host_pid=bool(pod.get("hostPID")),
    )


def used_share(mapping: Mapping | None, replicas: int) -> float:
    """Whole GPUs one unit of a time-sliced pod's utilisation stands for: 1 where the value is the pod's own
    share (per-process) or where one pod carries the GPU's whole value (one-pod); 1/replicas where every
    sharing pod carries a copy of the GPU's value (device-copy), so a fully shared GPU counts once."""
    return 1 / replicas if mapping is Mapping.DEVICE_COPY else 1.0


__all__ = [
    "BROKEN",
    "MEANING",
    "Deployment",
    "Mapping",
    "deployed_mapping",
    "deployment",
    "deployment_of",
    "env",
    "image_tag",
    "operator_values",
    "used_share",
]
