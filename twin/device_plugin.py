"""What the NVIDIA device plugin and GPU feature discovery advertise on a GPU node, from the deployed config.

Pure: the node's GPUs (what NVML would report), the device-plugin ConfigMap's data as deployed, the node's
labels, and the operator's settings in; the node's GPU resources and GFD labels out. Nothing here reads
gpufleet's own sharing helpers: the config is the rendered ConfigMap's text, parsed as the plugin parses it
(NVIDIA/k8s-device-plugin v0.20.0, the release GPU operator v26.7.0 deploys):

- **Which config.** The config-manager takes the entry named by the node's `nvidia.com/device-plugin.config`
  label; unset, the operator's `DEFAULT_CONFIG` (`devicePlugin.config.default`, gpu-operator v26.7.0
  controllers/object_controls.go:2893); a name the ConfigMap lacks is an error ("specified config ... does
  not exist", cmd/config-manager/main.go:351-357) and the plugin does not start: the node advertises no GPUs.
- **MIG strategy.** The operator sets `MIG_STRATEGY` from the ClusterPolicy (object_controls.go:2794), and a
  flag set on the command line or environment overrides the file's `flags.migStrategy`
  (api/config/v1/config.go:56, flags.go:32-51).
- **Time-slicing.** `sharing.timeSlicing.resources[].replicas` multiplies the devices of that resource;
  `renameByDefault: true` renames `nvidia.com/gpu` to `nvidia.com/gpu.shared` (api/config/v1/replicas.go:
  205-206, `DefaultSharedRename`). `failRequestsGreaterThanOne` rejects a container asking more than one
  replica at Allocate, in the kubelet, which the twin does not have: it is recorded in no label, as upstream.
- **GFD labels** (internal/lm/resource.go:38-72, :160-178, :263-316; lm/nvml.go:127-140, :171-190):
  `nvidia.com/gpu.product` (spaces as dashes, `-SHARED` when replicated and not renamed), `.count`,
  `.replicas` (1 unshared), `.sharing-strategy` (`none` unless replicas > 1), `.memory` (MiB), `.family`,
  `.compute.major/.minor`, the `cuda.driver*`/`cuda.runtime*` set, `mig.capable`, `mps.capable`, and with a MIG
  strategy other than none `nvidia.com/mig.strategy` (lm/mig-strategy.go:45-110). MIG-enabled GPUs are labelled
  without sharing (replicas 0), and each MIG profile under mixed gets `nvidia.com/mig-<profile>.count`,
  `.product` (`<GPU>-MIG-<profile>`), `.replicas`, `.sharing-strategy`, `.memory` (lm/mig-strategy.go:153-160,
  :262-290).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from infra import catalog

GPU = "nvidia.com/gpu"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
# Compute capability per GPU model (NVIDIA's "CUDA GPUs - Compute Capability" table): what NVML reports.
COMPUTE = {
    "A100-40GB": (8, 0), "A100-80GB": (8, 0), "H100": (9, 0), "H200": (9, 0), "B200": (10, 0),
    "A10G": (8, 6), "L4": (8, 9), "L40S": (8, 9), "T4": (7, 5), "T4G": (7, 5),
}  # fmt: skip
# The CUDA version a driver branch supports, what `cudaDriverGetVersion` reports (NVIDIA's CUDA Toolkit
# release notes, table 3: CUDA 13.0 GA needs >= 580).
CUDA_OF_BRANCH = {"580": (13, 0)}


@dataclass(frozen=True)
class Gpus:
    """A node's GPUs as NVML reports them: model, count, driver; `mig_layout` the MIG profile applied to every
    GPU (None: MIG disabled)."""

    model: str
    count: int
    driver: str  # e.g. "580.95.05"
    mig_layout: str | None = None


@dataclass(frozen=True)
class Advertised:
    resources: dict[str, str]
    labels: dict[str, str]
    error: str = ""  # why the plugin did not start (no resources then)


NO_CONFIG = "none"  # the plugin runs without a config file


def select_config(data: dict[str, str] | None, label: str | None, default: str) -> tuple[str, str]:
    """The config's name and text for a node (config-manager's rules); ("", error) when it fails. Before the
    stack's ConfigMap exists (a twin without its policy) the plugin runs as the operator deploys it without
    `devicePlugin.config`: no config file, its flags only (NO_CONFIG, "")."""
    if data is None:
        return NO_CONFIG, ""
    name = label or default
    if name not in data:
        return "", f"specified config {name} does not exist"
    return name, data[name]


def _product(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9-_. ]", "", name).replace(" ", "-")


def _gpu_labels(gpus: Gpus, resource: str, replicas: int, renamed: bool) -> dict[str, str]:
    model = catalog.GPU_MODELS[gpus.model]
    major, minor = COMPUTE[gpus.model]
    shared = replicas > 1
    family = {7: "volta" if minor < 5 else "turing", 8: "ampere" if minor < 9 else "ada-lovelace", 9: "hopper",
              10: "blackwell"}.get(major, "undefined")  # fmt: skip
    product = _product(model.product) + ("-SHARED" if shared and not renamed else "")
    return {
        f"{resource}.product": product,
        f"{resource}.count": str(gpus.count),
        f"{resource}.replicas": str(replicas),
        f"{resource}.sharing-strategy": "time-slicing" if shared else "none",
        f"{resource}.memory": str(model.memory_gib * 1024),
        f"{resource}.family": family,
        f"{resource}.compute.major": str(major),
        f"{resource}.compute.minor": str(minor),
    }


def _driver_labels(driver: str) -> dict[str, str]:
    major, minor, rev = [*driver.split("."), "", ""][:3]
    out = {
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev, "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor, "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": driver,
    }  # fmt: skip
    if major in CUDA_OF_BRANCH:
        c_major, c_minor = CUDA_OF_BRANCH[major]
        out |= {
            "nvidia.com/cuda.runtime.major": str(c_major), "nvidia.com/cuda.runtime.minor": str(c_minor),
            "nvidia.com/cuda.runtime-version.major": str(c_major),
            "nvidia.com/cuda.runtime-version.minor": str(c_minor),
            "nvidia.com/cuda.runtime-version.full": f"{c_major}.{c_minor}",
        }  # fmt: skip
    return out


def _time_slicing(config: dict[str, Any]) -> tuple[int, bool]:
    """Replicas of `nvidia.com/gpu` and whether it is renamed (renameByDefault)."""
    sharing = (config.get("sharing") or {}).get("timeSlicing") or {}
    for r in sharing.get("resources") or []:
        if r.get("name") == GPU and int(r.get("replicas") or 0) > 0:
            return int(r["replicas"]), bool(sharing.get("renameByDefault"))
    return 1, False


def _mig(gpus: Gpus, strategy: str) -> tuple[dict[str, str], dict[str, str]]:
    """Resources and labels of MIG-enabled GPUs: under mixed one resource per profile; the GPUs' own labels
    without sharing."""
    model = catalog.GPU_MODELS[gpus.model]
    profile = gpus.mig_layout or ""
    per_gpu = dict(model.mig_profiles).get(profile, 0)
    labels = {**_gpu_labels(gpus, GPU, 0, False), f"{GPU}.sharing-strategy": "none"}
    resources: dict[str, str] = {}
    if strategy == "mixed" and per_gpu:
        name = f"nvidia.com/mig-{profile}"
        memory = re.search(r"\.(\d+)gb", profile)
        resources[name] = str(gpus.count * per_gpu)
        labels |= {
            f"{name}.count": str(gpus.count * per_gpu),
            f"{name}.product": f"{_product(model.product)}-MIG-{profile}",
            f"{name}.replicas": "1",
            f"{name}.sharing-strategy": "none",
            **({f"{name}.memory": str(int(memory.group(1)) * 1024)} if memory else {}),
        }
    return resources, labels


def advertise(gpus: Gpus, config_text: str, strategy: str) -> Advertised:
    """The node's GPU resources and GFD labels under one config file (`strategy`: the operator's
    MIG_STRATEGY, which overrides the file's)."""
    config = yaml.safe_load(config_text) or {}
    model = catalog.GPU_MODELS[gpus.model]
    common = {
        **_driver_labels(gpus.driver),
        "nvidia.com/mig.capable": str(bool(model.mig_profiles)).lower(),
        "nvidia.com/mps.capable": "false",
    }
    if strategy != "none":
        common["nvidia.com/mig.strategy"] = strategy
    if gpus.mig_layout and model.mig_profiles:
        resources, labels = _mig(gpus, strategy)
        return Advertised(resources, {**common, **labels})
    replicas, renamed = _time_slicing(config)
    resource = f"{GPU}.shared" if renamed and replicas > 1 else GPU
    resources = {resource: str(gpus.count * replicas)}
    return Advertised(resources, {**common, **_gpu_labels(gpus, GPU, replicas, renamed)})
