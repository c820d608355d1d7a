"""The twin's stand-in for dcgm-exporter: the one monitoring component that needs a GPU.

On a real node the GPU operator runs dcgm-exporter as a DaemonSet; it reads the GPUs through DCGM/NVML and asks
the kubelet's pod-resources API which pod holds which device. The twin has neither, so each exporter pod the
twin's DaemonSet creates is served by this module at the pod's own IP and port 9400, and the series it serves
follow the dcgm-exporter release the DaemonSet runs (its image tag) and what the DaemonSet gives it:

- **the text format and labels** of `internal/pkg/rendermetrics/render_metrics.go`: every series carries
  `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`; MIG instances add `GPU_I_PROFILE` and
  `GPU_I_ID`; counters of type `label` in the counter file (e.g. `DCGM_FI_DRIVER_VERSION`) become labels;
  the pod mapping's attributes follow (`pod`, `namespace`, `container`, `pod_uid`, `vgpu`; an empty one is
  written empty, which Prometheus drops);
- **the counters** are exactly those of the counter file the exporter is given (the GPU operator mounts the
  `dcgmExporter.config` ConfigMap and points `DCGM_EXPORTER_COLLECTORS` at it), one line per field;
- **the pod mapping** of `internal/pkg/transformation/kubernetes.go` at the release
  (`infra.versions.DCGM_EXPORTER_RELEASES`, `infra.monitoring.exporter.Deployment.mapping`): only devices of
  resource `nvidia.com/gpu`, `nvidia.com/mig-*` or a name in `NVIDIA_RESOURCE_NAMES` are mapped
  (4.5.3-4.8.2 :67-92); then one of four behaviours:
  - one-pod, without `KUBERNETES_VIRTUAL_GPUS` (4.5.3-4.8.2 `toDeviceToPod` :712-918 and :412-452,
    4.5.2-4.8.1 :582-778 and :299-329): a device id `<uuid>::<n>` (a time-sliced replica) maps its GPU, the
    last pod wins; the held GPU's series carries that pod (`pod_uid` only with
    DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID), a free GPU keeps its own;
  - device-copy, 4.5.2-4.8.1 with `KUBERNETES_VIRTUAL_GPUS` (:246-297): every pod holding a device gets a copy
    of each of its series with the device's own value (and `vgpu="<n>"` for a replica), and once any device of
    the node is held the series of every free one is dropped (`metrics[counter] = newmetrics`, :292-294);
  - per-process, 4.5.3-4.8.2 with `KUBERNETES_VIRTUAL_GPUS` (:338-410): GPU utilisation and framebuffer of
    a held device are each pod's own processes' (process_metrics.go; here the pod's utilisation annotation)
    with `pod_uid`, beside the device's own pod-less series (:366); other fields are copied per pod with the
    device's value (:371-398); free devices keep their series (:399-403). Processes are mapped to pods through
    `/proc/<pid>/cgroup` (pidmapper.go:45: the host's PID namespace, `hostPID`) and the pods' UIDs from the API
    server (createPodInfo :920-955: a pod informer, only with a service-account token, :109-119);
  - unmapped-zero, the same without the token or the host's PIDs: no process maps to a pod, and every pod
    holding a device reads "0" for those two fields (buildIdlePodValues :271-279), beside the device's real
    series;
- **device ids** as the NVIDIA device plugin hands them to the kubelet: GPU UUIDs, `<uuid>::<replica>` for
  time-slicing, MIG device UUIDs. Devices are given to a node's running pods in creation order.

What the GPUs *do* is the workload's: a pod's annotation `gpufleet.io/twin-gpu-util` (percent, default 0) is
its GPUs' utilisation, as a kernel keeping them busy would make it (a time-sliced GPU's is the sum of its pods',
at most 100). Faults are the node's: annotations
`gpufleet.io/twin-xid: "<gpu>:<xid>"`, `gpufleet.io/twin-ecc-dbe: "<gpu>:<count>"`, `gpufleet.io/twin-gpu-lost:
"<gpu>"` (that GPU stops reporting, as a GPU off the bus does: NVIDIA/DCGM#162), `gpufleet.io/twin-exporter: "down"`
(the exporter answers every scrape with an error, as one that lost DCGM does). Nothing here labels a series
for a test: the exporter's own rules decide every label.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from infra.monitoring.exporter import Deployment, Mapping

UTIL_ANNOTATION = "gpufleet.io/twin-gpu-util"
XID_ANNOTATION = "gpufleet.io/twin-xid"
ECC_ANNOTATION = "gpufleet.io/twin-ecc-dbe"
LOST_ANNOTATION = "gpufleet.io/twin-gpu-lost"
DOWN_ANNOTATION = "gpufleet.io/twin-exporter"
GPU_RESOURCE = "nvidia.com/gpu"  # appconfig.NvidiaResourceName
MIG_PREFIX = "nvidia.com/mig-"  # appconfig.NvidiaMigResourcePrefix
PORT = 9400  # the DaemonSet's DCGM_EXPORTER_LISTEN ":9400"
DRIVER_VERSION = "580.95.05"  # infra.versions' host driver pin, what DCGM_FI_DRIVER_VERSION would report
# Fields dcgm-exporter reports per process with KUBERNETES_VIRTUAL_GPUS from 4.5.3-4.8.2 on
# (transformation/process_metrics.go:30-32, isPerProcessMetric): GPU utilisation and framebuffer used.
PER_PROCESS = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"})
POD_UID_ENV = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"  # appconfig KubernetesEnablePodUID (pkg/cmd/app.go)


@dataclass(frozen=True)
class Counter:
    field: str
    kind: str  # gauge, counter, label


def parse_counters(csv: str) -> list[Counter]:
    """dcgm-exporter's counter file: `field, type, help` per line, `#` comments (etc/default-counters.csv)."""
    out = []
    for line in csv.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2:
            out.append(Counter(parts[0], parts[1]))
    return out


@dataclass
class Device:
    """One entity dcgm-exporter reports: a GPU, or a MIG instance of one."""

    gpu: int
    uuid: str
    mig_profile: str = ""
    instance: int = -1
    holders: list[tuple[dict[str, str], int]] = field(default_factory=list)  # (pod info, vgpu or -1)
    users: list[str] = field(default_factory=list)  # every pod using it, mapped or not (`namespace/name`)

    def base_labels(self, node: str, model: str) -> dict[str, str]:
        labels = {
            "gpu": str(self.gpu),
            "UUID": self.uuid,
            "pci_bus_id": f"00000000:{0x18 + self.gpu:02X}:00.0",
            "device": f"nvidia{self.gpu}",
            "modelName": model,
        }
        if self.mig_profile:
            labels |= {"GPU_I_PROFILE": self.mig_profile, "GPU_I_ID": str(self.instance)}
        return labels | {"Hostname": node}


def _uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuid.uuid5(uuid.NAMESPACE_URL, '/'.join(map(str, parts)))}"


def _int(text: Any) -> int:
    try:
        return int(str(text))
    except ValueError:
        return 0


@dataclass
class NodeGpus:
    """A node's GPUs as NVML would list them, from what its device plugin advertises."""

    node: str
    model: str
    gpus: list[Device]
    instances: list[Device]  # MIG instances (empty without MIG)
    replicas: int  # time-slicing replicas per GPU (1 without)

    @classmethod
    def of(cls, node: dict[str, Any]) -> NodeGpus:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels", {})
        allocatable = node.get("status", {}).get("capacity", {})
        count = _int(labels.get("nvidia.com/gpu.count", allocatable.get(GPU_RESOURCE, 0)))
        model = labels.get("nvidia.com/gpu.product", "").replace("-", " ")
        gpus = [Device(i, _uuid("GPU", name, i)) for i in range(count)]
        instances: list[Device] = []
        for resource, quantity in sorted(allocatable.items()):
            if resource.startswith(MIG_PREFIX) and count:
                profile = resource.removeprefix(MIG_PREFIX)
                per_gpu = _int(quantity) // count
                for g in gpus:
                    first = sum(1 for d in instances if d.gpu == g.gpu)
                    instances += [Device(g.gpu, g.uuid, profile, first + k) for k in range(per_gpu)]
        return cls(name, model, gpus, instances, max(1, _int(labels.get("nvidia.com/gpu.replicas", 1))))


def _pod_info(pod: dict[str, Any], container: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {
        "pod": meta["name"],
        "namespace": meta["namespace"],
        "container": container,
        "uid": meta.get("uid", ""),
    }


def assign(
    gpus: NodeGpus, pods: list[dict[str, Any]], resource_names: frozenset[str], virtual: bool
) -> dict[str, int]:
    """Give the node's running pods their devices (creation order) and record who holds what as dcgm-exporter's
    pod mapper would see it: with `virtual` every mapped pod of a device (`toDeviceToSharingPods`), without it
    the last one (`toDeviceToPod`, one map entry per device). Returns each pod's utilisation (its annotation)
    by `namespace/name`."""
    util: dict[str, int] = {}
    free_whole = list(gpus.gpus)
    slots = [(g, r) for g in gpus.gpus for r in range(gpus.replicas)] if gpus.replicas > 1 else []
    free_mig: dict[str, list[Device]] = {}
    for inst in gpus.instances:
        free_mig.setdefault(inst.mig_profile, []).append(inst)
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    running.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))

    def hold(device: Device, info: dict[str, str], mapped: bool, vgpu: int = -1) -> None:
        device.users.append(info["key"])
        if mapped:
            device.holders = [*device.holders, (info, vgpu)] if virtual else [(info, -1)]

    for pod in running:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        util[key] = _int(pod["metadata"].get("annotations", {}).get(UTIL_ANNOTATION, 0))
        for c in pod["spec"].get("containers", []):
            limits = {
                **c.get("resources", {}).get("requests", {}),
                **c.get("resources", {}).get("limits", {}),
            }
            info = _pod_info(pod, c["name"]) | {"key": key}
            for resource, quantity in limits.items():
                n = _int(quantity)
                mapped = (
                    resource == GPU_RESOURCE or resource.startswith(MIG_PREFIX) or resource in resource_names
                )
                if resource == GPU_RESOURCE:
                    for g in free_whole[:n]:
                        hold(g, info, mapped)
                    del free_whole[:n]
                elif resource.startswith(MIG_PREFIX):
                    pool = free_mig.get(resource.removeprefix(MIG_PREFIX), [])
                    for inst in pool[:n]:
                        hold(inst, info, mapped)
                    del pool[:n]
                elif resource.startswith("nvidia.com/gpu.") and slots:
                    for g, replica in slots[:n]:
                        hold(g, info, mapped, replica)
                    del slots[:n]
    return util


def _fault(node: dict[str, Any], annotation: str) -> dict[int, int]:
    """`"<gpu>:<value>"` pairs, comma separated, from a node annotation."""
    text = node["metadata"].get("annotations", {}).get(annotation, "")
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        gpu, _, value = part.partition(":")
        out[_int(gpu)] = _int(value or 1)
    return out


def _value(counter: str, device: Device, util: float, faults: dict[str, dict[int, int]]) -> float | None:
    """A field's value on a device; None where DCGM reports none (GPU utilisation of a MIG instance)."""
    if counter == "DCGM_FI_DEV_GPU_UTIL":
        return None if device.mig_profile else util
    if counter in (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ):
        return round(util / 100, 4)
    if counter == "DCGM_FI_DEV_XID_ERRORS":
        return float(faults["xid"].get(device.gpu, 0))
    if counter in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"):
        return float(faults["ecc"].get(device.gpu, 0))
    if counter == "DCGM_FI_DEV_GPU_TEMP":
        return 40.0 + util / 4
    if counter == "DCGM_FI_DEV_POWER_USAGE":
        return 80.0 + util * 3
    return 0.0


def _series(name: str, labels: dict[str, str], value: float) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{body}}} {value:g}"


@dataclass(frozen=True)
class Shape:
    """What the exporter pod runs: its container environment and the deployment its pod mapping depends on
    (`infra.monitoring.exporter.deployment_of` of its DaemonSet)."""

    env: dict[str, str]
    deployment: Deployment

    @property
    def mapping(self) -> Mapping:
        found = self.deployment.mapping
        if found is None:
            raise RuntimeError(f"no model of dcgm-exporter {self.deployment.release!r}'s pod mapping")
        return found


def render(node: dict[str, Any], pods: list[dict[str, Any]], counters: list[Counter], shape: Shape) -> str:
    """The /metrics text one exporter pod serves for its node."""
    if node["metadata"].get("annotations", {}).get(DOWN_ANNOTATION) == "down":
        raise RuntimeError("DCGM is not reachable")
    mapping = shape.mapping
    gpus = NodeGpus.of(node)
    names = frozenset(n.strip() for n in shape.env.get("NVIDIA_RESOURCE_NAMES", "").split(",") if n.strip())
    util = assign(gpus, pods, names, shape.deployment.virtual_gpus)
    faults = {"xid": _fault(node, XID_ANNOTATION), "ecc": _fault(node, ECC_ANNOTATION)}
    lost = set(_fault(node, LOST_ANNOTATION))
    extra = {c.field: DRIVER_VERSION for c in counters if c.kind == "label"}
    uid_label = shape.env.get(POD_UID_ENV, "").lower() == "true"
    lines: list[str] = []
    devices = [d for d in (gpus.instances or gpus.gpus) if d.gpu not in lost]
    for counter in counters:
        if counter.kind == "label":
            continue
        if counter.field == "DCGM_EXP_XID_ERRORS_COUNT":
            lines += _xid_counts(counter, gpus, faults["xid"], lost, extra)
            continue
        lines.append(f"# HELP {counter.field} {counter.field}")
        lines.append(f"# TYPE {counter.field} {counter.kind}")
        # device-copy: once a device of the node is held, the counter's list is only the pod copies (:292-294)
        drop_free = mapping is Mapping.DEVICE_COPY and any(d.holders for d in devices)
        for device in devices:
            level = min(100.0, float(sum(util.get(key, 0) for key in device.users)))
            value = _value(counter.field, device, level, faults)
            if value is None:
                continue
            base = device.base_labels(gpus.node, gpus.model) | extra
            if not device.holders:
                if not drop_free:
                    lines.append(_series(counter.field, base, value))  # a free device, no pod labels
                continue
            per_process = (
                mapping in (Mapping.PER_PROCESS, Mapping.UNMAPPED_ZERO) and counter.field in PER_PROCESS
            )
            if per_process:
                lines.append(_series(counter.field, base, value))  # the device's own series (:366)
            for info, vgpu in device.holders:
                labels = base | {k: info[k] for k in ("pod", "namespace", "container")}
                own = value
                if per_process:
                    # each pod's own processes' (createPerProcessMetrics :201-252); unmapped pods read "0"
                    own = (
                        _own(counter.field, util.get(info["key"], 0))
                        if mapping is Mapping.PER_PROCESS
                        else 0.0
                    )
                    labels["pod_uid"] = info["uid"] if shape.deployment.api_token else ""
                elif mapping is Mapping.DEVICE_COPY:
                    labels["pod_uid"] = info["uid"] if uid_label else ""  # 4.5.2-4.8.1 :281, set always
                elif uid_label:
                    labels["pod_uid"] = info["uid"]
                if vgpu >= 0:
                    labels["vgpu"] = str(vgpu)
                lines.append(_series(counter.field, labels, own))
    return "\n".join(lines) + "\n"


def _own(field: str, pod_util: int) -> float:
    """A pod's own processes' value of a per-process field: its utilisation; framebuffer is not modelled (0)."""
    return min(100.0, float(pod_util)) if field == "DCGM_FI_DEV_GPU_UTIL" else 0.0


def _xid_counts(
    counter: Counter, gpus: NodeGpus, xids: dict[int, int], lost: set[int], extra: dict[str, str]
) -> list[str]:
    """`DCGM_EXP_XID_ERRORS_COUNT{xid}`: XIDs seen in the exporter's window, one series per GPU and XID
    (internal/pkg/collector/xid_collector.go: the `xid` label filled per entity value)."""
    lines = [f"# HELP {counter.field} {counter.field}", f"# TYPE {counter.field} {counter.kind}"]
    for g in gpus.gpus:
        if g.gpu in xids and g.gpu not in lost:
            labels = g.base_labels(gpus.node, gpus.model) | extra | {"xid": str(xids[g.gpu])}
            lines.append(_series(counter.field, labels, 1))
    return lines


Fetch = Callable[[], tuple[dict[str, Any], list[dict[str, Any]], list[Counter], Shape]]


class ExporterServer:
    """One exporter pod's endpoint: `GET /metrics` renders the node as it is at that moment; `/health` is the
    DaemonSet's probe path. `fetch` returns the node, the pods on it, the counter file and the exporter's
    shape (environment and deployment)."""

    def __init__(self, address: str, fetch: Fetch, port: int = PORT) -> None:
        self.stopped = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if outer.stopped.is_set():
                    self.send_error(503)
                    return
                if self.path.startswith("/health"):
                    body = b"OK"
                elif self.path.startswith("/metrics"):
                    try:
                        body = render(*fetch()).encode()
                    except Exception as exc:
                        self.send_error(500, str(exc)[:200])
                        return
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"dcgm-{address}", daemon=True)

    def start(self) -> ExporterServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


__all__ = ["ExporterServer", "NodeGpus", "Shape", "assign", "parse_counters", "render"]
