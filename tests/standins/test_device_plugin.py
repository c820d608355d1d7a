"""The device plugin and GFD stand-in (twin.device_plugin, twin.gpu_operands) on the ConfigMap the stacks render:
the numbers are the plugin's rules at v0.20.0 worked by hand, so a config the stack renders wrong (no rename, a
wrong replica count, a missing entry) shows here as the node's resources would show it."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from infra.scheduling import pool_view
from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from scheduler.sharing import device_plugin_configmap
from tests.conftest import ROOT
from twin.device_plugin import NO_CONFIG, Gpus, advertise, select_config
from twin.gpu_operands import APPLIED_MIG, PAUSED, STATE_LABEL, GpuOperands

METAL = load_stack(ROOT / "Pulumi.metal.yaml")
PROD = load_stack(ROOT / "Pulumi.example-prod.yaml")


def rendered(spec: ClusterSpec) -> dict[str, str]:
    """The device-plugin ConfigMap's data as the stack deploys it."""
    return dict(device_plugin_configmap([pool_view(spec, p) for p in spec.node_pools])["data"])


def test_a_time_sliced_pool_advertises_renamed_replicas_with_their_labels() -> None:
    """metal's l40s hosts: 4 GPUs, replicas 2, renameByDefault: 8 x `nvidia.com/gpu.shared`, no whole GPU,
    product without -SHARED (renamed), strategy time-slicing; Ada, compute 8.9, 48 GiB in MiB."""
    name, text = select_config(rendered(METAL), "l40s", "default")
    got = advertise(Gpus("L40S", 4, "580.95.05"), text, "single")
    assert name == "l40s"
    assert got.resources == {"nvidia.com/gpu.shared": "8"}
    labels = got.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"]) == (
        "2",
        "time-slicing",
    )
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("4", "49152")
    assert labels["nvidia.com/gpu.family"] == "ada-lovelace"
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == ("8", "9")
    assert labels["nvidia.com/cuda.driver.major"] == "580" and labels["nvidia.com/cuda.runtime.major"] == "13"
    assert labels["nvidia.com/mig.strategy"] == "single"


def test_without_the_label_the_default_entry_gives_whole_gpus() -> None:
    name, text = select_config(rendered(METAL), None, "default")
    got = advertise(Gpus("L40S", 4, "580.95.05"), text, "none")
    assert name == "default" and got.resources == {"nvidia.com/gpu": "4"}
    assert (
        got.labels["nvidia.com/gpu.replicas"] == "1"
        and got.labels["nvidia.com/gpu.sharing-strategy"] == "none"
    )
    assert "nvidia.com/mig.strategy" not in got.labels


def test_replicas_without_rename_stay_gpu_and_mark_the_product_shared() -> None:
    config = yaml.safe_dump(
        {
            "version": "v1",
            "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}},
        }
    )
    got = advertise(Gpus("A10G", 1, "580.95.05"), config, "none")
    assert got.resources == {"nvidia.com/gpu": "3"}
    assert got.labels["nvidia.com/gpu.product"] == "NVIDIA-A10G-SHARED"


def test_a_label_naming_a_missing_entry_stops_the_plugin() -> None:
    name, error = select_config(rendered(METAL), "h100", "default")
    assert name == "" and error == "specified config h100 does not exist"


def test_no_configmap_runs_without_a_config_file() -> None:
    assert select_config(None, "l40s", "default") == (NO_CONFIG, "")


def test_a_mig_pool_under_mixed_advertises_its_profile_and_no_whole_gpu() -> None:
    """example-prod's h100-mig (all-1g.10gb): 8 GPUs x 7 instances; the GPUs keep their labels, unshared."""
    mig = next(p for p in PROD.node_pools if p.sharing.mode == "mig")
    profile = mig.sharing.mig
    _, text = select_config(rendered(PROD), mig.name, "default")
    got = advertise(Gpus("H100", 8, "580.95.05", profile), text, "mixed")
    assert got.resources == {f"nvidia.com/mig-{profile}": "56"}
    assert got.labels[f"nvidia.com/mig-{profile}.product"] == f"NVIDIA-H100-80GB-HBM3-MIG-{profile}"
    assert got.labels["nvidia.com/gpu.replicas"] == "0" and got.labels["nvidia.com/mig.capable"] == "true"


def test_a_new_mig_layout_pauses_the_node_then_applies() -> None:
    """mig-manager's order: pending with the clients paused, then success with them back and the layout
    applied; nothing is advertised between."""
    operands = GpuOperands(Path("/nonexistent"), "mixed", "default", time_scale=0.002)  # 0.12 s
    node = {"metadata": {"name": "n1", "annotations": {APPLIED_MIG: "all-1g.10gb"}}}
    labels = {"nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/gpu.deploy.device-plugin": "true"}
    layout, changes = operands._mig(node, labels)
    assert layout is None
    assert changes["labels"][STATE_LABEL] == "pending"
    assert changes["labels"]["nvidia.com/gpu.deploy.device-plugin"] == PAUSED
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        layout, changes = operands._mig(node, labels)
        if layout:
            break
        time.sleep(0.05)
    assert layout == "3g.40gb"
    assert changes["labels"][STATE_LABEL] == "success"
    assert changes["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert changes["annotations"] == {APPLIED_MIG: "all-3g.40gb"}


def test_every_catalog_gpu_has_a_compute_capability() -> None:
    from infra import catalog
    from twin.device_plugin import COMPUTE

    assert set(catalog.GPU_MODELS) <= set(COMPUTE)
