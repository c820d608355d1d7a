"""The GPU operator's operands on the twin's GPU nodes: the device plugin and GPU feature discovery, and the
pause mig-manager makes when a node's MIG layout changes. A thread of the twin's session, like the autoscaler.

Twin nodes register as a real GPU node does before the operator's operands run: with their GPUs described
(the `gpufleet.io/twin-gpus` annotation: model, count, driver, what NVML would report) and no GPU resource.
Each pass reads the device-plugin ConfigMap as deployed and every GPU node's labels, and writes what the
plugin and GFD would (`twin.device_plugin`): the resources into the node's status, the GFD labels onto it,
recomputed whenever the config label, the ConfigMap or the MIG layout changes.

A change of `nvidia.com/mig.config` is not instant. mig-manager (NVIDIA/mig-parted v0.15.0, the GPU operator
v26.7.0 default) sets `nvidia.com/mig.config.state=pending` (pkg/mig/reconfigure/reconfigure.go:158), pauses
the GPU clients by setting their `nvidia.com/gpu.deploy.<operand>` labels to `paused-for-mig-change`
(:371-385, :584-586), so the device plugin goes and the kubelet stops offering the GPUs, repartitions, then
restores the labels and sets `success` (:239). The twin holds the node that way for `MIG_PAUSE_S` (times the
twin's time scale) before advertising the new layout.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from scheduler.labels import DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE
from twin.device_plugin import (
    CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    NO_CONFIG,
    Advertised,
    Gpus,
    advertise,
    select_config,
)
from twin.listing import listed

log = logging.getLogger("twin.gpu_operands")
HARDWARE_ANNOTATION = "gpufleet.io/twin-gpus"
SEEN_ANNOTATION = (
    "gpufleet.io/twin-device-plugin"  # the config the plugin stand-in last applied (or its error)
)
APPLIED_MIG = "gpufleet.io/twin-mig-applied"  # the layout the GPUs are in (what mig-parted last applied)
STATE_LABEL = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
PAUSABLE = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")  # reconfigure.go:374-379
MIG_PAUSE_S = 60.0  # a repartition without reboot: clients stopped, mig-parted applied, clients back
GFD_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/mig-", "nvidia.com/cuda.", "nvidia.com/mig.strategy",
                "nvidia.com/mig.capable", "nvidia.com/mps.capable")  # fmt: skip
KEEP = ("nvidia.com/gpu.present", "nvidia.com/gpu.deploy.")  # the operator's labels, not GFD's


def mig_profile(config_name: str | None) -> str | None:
    """The profile a mig-parted config of the operator's default set puts on every GPU (`all-<profile>`)."""
    if not config_name or not config_name.startswith("all-") or config_name == "all-disabled":
        return None
    return config_name.removeprefix("all-")


def _gfd(key: str) -> bool:
    return key.startswith(GFD_PREFIXES) and not key.startswith(KEEP)


class GpuOperands:
    def __init__(self, kubeconfig: Path, strategy: str, default_config: str, time_scale: float = 1.0) -> None:
        self.kubeconfig, self.strategy, self.default = kubeconfig, strategy, default_config
        self.pause_s = MIG_PAUSE_S * time_scale
        self.pausing: dict[str, float] = {}  # node -> when its repartition is done
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api: Any = None  # the loop's CoreV1Api (`_core`)

    def _core(self) -> Any:
        """One client for the thread's life: a new one would cost a TLS handshake each pass."""
        if self._api is None:
            from kubernetes import client, config

            self._api = client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))
        return self._api

    def _data(self, core: Any) -> dict[str, str] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            cm = core.read_namespaced_config_map(DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict(cm.data or {})

    def _mig(self, node: dict[str, Any], labels: dict[str, str]) -> tuple[str | None, dict[str, Any]]:
        """The layout the GPUs are in, and the label and annotation changes mig-manager makes now."""
        name = node["metadata"]["name"]
        wanted = labels.get(MIG_CONFIG_LABEL)
        applied = (node["metadata"].get("annotations") or {}).get(APPLIED_MIG)
        if wanted == applied or (wanted is None and applied is None):
            return mig_profile(applied), {}
        done = self.pausing.setdefault(name, time.monotonic() + self.pause_s)
        paused = {f"nvidia.com/gpu.deploy.{o}": PAUSED for o in PAUSABLE
                  if labels.get(f"nvidia.com/gpu.deploy.{o}", "true") != "false"}  # fmt: skip
        if time.monotonic() < done:
            return None, {"labels": {STATE_LABEL: "pending", **paused}}
        self.pausing.pop(name, None)
        restored = {k: "true" for k in paused}
        changes = {"labels": {STATE_LABEL: "success", **restored}, "annotations": {APPLIED_MIG: wanted}}
        return mig_profile(wanted), changes

    def _node(self, core: Any, node: dict[str, Any], data: dict[str, str] | None) -> None:
        meta = node["metadata"]
        labels = dict(meta.get("labels") or {})
        hardware = json.loads(meta["annotations"][HARDWARE_ANNOTATION])
        layout, changes = self._mig(node, labels)
        paused = changes.get("labels", {}).get(STATE_LABEL) == "pending"
        name, text = select_config(data, labels.get(CONFIG_LABEL), self.default)
        if paused:
            result, seen = Advertised({}, {}), "paused"
        elif name:  # an empty text is no config file: the flags' defaults
            gpus = Gpus(hardware["model"], int(hardware["count"]), hardware["driver"], layout)
            result, seen = advertise(gpus, text, self.strategy), name
        else:
            result, seen = Advertised({}, {}, text), f"error: {text}"
        new_labels = {**{k: None for k in labels if _gfd(k)}, **result.labels, **changes.get("labels", {})}
        if paused:  # GFD's labels stay while it is paused; only the plugin's resources go
            new_labels = {k: v for k, v in new_labels.items() if v is not None}
        annotations = {SEEN_ANNOTATION: seen, **changes.get("annotations", {})}
        if any(labels.get(k) != v for k, v in new_labels.items()) or any(
            (meta.get("annotations") or {}).get(k) != v for k, v in annotations.items()
        ):
            core.patch_node(meta["name"], {"metadata": {"labels": new_labels, "annotations": annotations}})
        status = node.get("status") or {}
        gpu_keys = {k for part in ("capacity", "allocatable") for k in status.get(part) or {}
                    if k.startswith("nvidia.com/")}  # fmt: skip
        wanted = {**{k: None for k in gpu_keys}, **result.resources}
        if any((status.get("allocatable") or {}).get(k) != v for k, v in wanted.items()):
            core.patch_node_status(meta["name"], {"status": {"capacity": wanted, "allocatable": wanted}})
            log.info("node %s: %s (%s)", meta["name"], result.resources or "no GPU resources", seen)

    def settled(self, nodes: list[dict[str, Any]], deployed: bool) -> bool:
        """Whether every GPU node shows what the plugin makes of its current label (`deployed`: with the
        stack's ConfigMap, else without a config file) and no repartition runs."""
        for node in nodes:
            meta = node["metadata"]
            annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
            if HARDWARE_ANNOTATION not in annotations:
                continue
            seen = annotations.get(SEEN_ANNOTATION, "")
            wanted = labels.get(CONFIG_LABEL) or self.default
            if labels.get(MIG_CONFIG_LABEL) != annotations.get(APPLIED_MIG):
                return False
            if seen != (wanted if deployed else NO_CONFIG) and not seen.startswith("error"):
                return False
        return True

    def step(self) -> None:
        core = self._core()
        data = self._data(core)
        for item in listed(core.list_node):
            if HARDWARE_ANNOTATION in (item["metadata"].get("annotations") or {}):
                self._node(core, item, data)

    def start(self) -> GpuOperands:
        def loop() -> None:
            while not self._stop.wait(0.5):
                try:
                    self.step()
                except Exception:
                    log.exception("the GPU operands' pass failed; trying again")

        self._thread = threading.Thread(target=loop, name="twin-gpu-operands", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
