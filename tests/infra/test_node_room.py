"""What a pod can have of an EKS node: allocatable less the DaemonSets' requests, and the plan's warning per pool.

The numbers are worked by hand from the sources `infra.aws.node_room` and `infra.aws.node_daemonsets` cite; the
twin's e2e check (tests/twin/test_autoscaler.py) compares them with the pods the real DaemonSet controller and
scheduler put on a node."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.aws.node_daemonsets import DAEMONSETS, node_daemonsets
from infra.aws.node_room import kube_reserved_cpu_milli, node_room, room_warnings
from infra.scheduling import pool_view
from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from scheduler.gpu_share import unit_shares
from scheduler.model import PoolView
from scheduler.resources import gpu_resource, units_per_gpu
from tests.conftest import ROOT
from twin.autoscaler.fit import rejections
from twin.daemonsets import node_daemonset_manifests
from twin.nodes import twin_nodes

PROD = load_stack(ROOT / "Pulumi.example-prod.yaml")
AWS_STACKS = ("dev", "example-prod", "example-karpenter")


def test_kube_reserved_cpu_of_a_p5() -> None:
    """192 vCPUs: 60 + 10 + 2 x 5 + 188 x 2.5 = 550 milli."""
    assert kube_reserved_cpu_milli(192) == 550


def test_an_efa_pool_node_carries_the_efa_plugin_and_the_others_not() -> None:
    """h100-train (p5.48xlarge, EFA): aws-node 25m + kube-proxy 100m + monitoring agent 10m/30Mi + EFA plugin
    10m/20Mi + NFD worker 5m/64Mi = 150m, 114Mi; h100-mig (same type, no EFA) 140m, 94Mi. Allocatable: 192000m
    - 550m, 2 TiB - (11 x 110 + 255 + 100) MiB."""
    train = node_room(PROD, next(p for p in PROD.node_pools if p.name == "h100-train"))
    mig = node_room(PROD, next(p for p in PROD.node_pools if p.name == "h100-mig"))
    assert train is not None and mig is not None
    assert train.allocatable == (191450, 2097152 - 1565)
    assert train.overhead == (150, 114)
    assert mig.overhead == (140, 94)
    assert train.room == (191300, 2097152 - 1565 - 114)
    assert (
        "aws-efa-k8s-device-plugin" in train.daemonsets and "aws-efa-k8s-device-plugin" not in mig.daemonsets
    )


def _views(spec: ClusterSpec) -> list[PoolView]:
    return [pool_view(spec, p) for p in spec.node_pools]


def test_the_warning_names_each_pool_and_its_overhead() -> None:
    warnings = room_warnings(PROD, _views(PROD))
    assert len(warnings) == len(PROD.node_pools)
    first = warnings[0]
    assert first.startswith("nodePools[0] (h100-train): ")
    assert "request cpu 150m and memory 114Mi" in first
    assert "at most cpu 191300m and memory 2095473Mi" in first


def test_a_gpu_units_share_is_cut_from_the_room_so_a_node_at_its_share_fits() -> None:
    """Every unit of a node asked at the admission policy's share fits the node's room: 4 A10G replicas at 1.94
    cores (7,770m over 4) and 8 H100s at 23.91 (191,300m over 8); at the node's whole cores (2 and 24, as the
    share was cut before) the fourth replica and the eighth GPU find no room. Where l40s-infer shares
    nvidia.com/gpu with h100-train, the larger share applies and the plan says a job sized to the node stays
    Pending there; on the pools whose own share applies, that it is refused."""
    views = {v.name: v for v in _views(PROD)}
    shares = unit_shares(list(views.values()))
    for pool in ("a10g-batch", "h100-train", "h100-mig"):
        view = views[pool]
        room = node_room(PROD, next(p for p in PROD.node_pools if p.name == pool))
        assert room is not None
        units = view.gpus_per_node * units_per_gpu(view)
        cores, gib = shares[gpu_resource(view)]
        assert units * cores * 1000 <= room.room[0] + 1 and units * gib * 1024 <= room.room[1] + 1, pool
        assert (view.cpus_per_node or 0) * 1000 > room.room[0], (
            pool
        )  # a share of the whole node would not fit
    warnings = room_warnings(PROD, list(views.values()))
    assert "1.94 cores and 7.59 GiB per nvidia.com/gpu.shared unit" in warnings[2]
    assert "refused when it is created" in warnings[2] and "refused when it is created" in warnings[0]
    assert "h100-train's share" in warnings[1] and "stays Pending" in warnings[1], warnings[1]


def test_no_warning_off_aws() -> None:
    metal = load_stack(ROOT / "Pulumi.metal.yaml")
    assert room_warnings(metal, _views(metal)) == []


def test_operands_without_requests_have_none_in_the_pinned_chart(shared_dir: Path) -> None:
    """The GPU operator's operands the module lists with no requests have `resources: {}` in the chart's values
    at the pinned release (the reference data's copy of v26.7.0 deployments/gpu-operator/values.yaml)."""
    values = yaml.safe_load((shared_dir / "crds" / "gpu-operator" / "values.yaml").read_text())
    keys = {
        "nvidia-device-plugin-daemonset": "devicePlugin",
        "gpu-feature-discovery": "gfd",
        "nvidia-dcgm-exporter": "dcgmExporter",
        "nvidia-operator-validator": "validator",
        "nvidia-mig-manager": "migManager",
    }
    listed = {d.name: d for d in DAEMONSETS}
    for name, key in keys.items():
        assert values[key]["resources"] == {}, key
        assert listed[name].requests == {}, name


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_twin_daemonsets_select_the_nodes_the_plan_counts(stack: str) -> None:
    """Each twin DaemonSet's affinity and tolerations, read as the scheduler reads them, admit exactly the nodes
    of the pools whose overhead the plan counts it in (a pool taint left untolerated would fail here)."""
    spec = load_stack(ROOT / f"Pulumi.{stack}.yaml")
    pools = {p.name: p for p in spec.node_pools}
    manifests = {m["metadata"]["name"]: m["spec"]["template"]["spec"] for m in node_daemonset_manifests(spec)}
    for node in twin_nodes(spec, "max"):
        planned = {d.name for d in node_daemonsets(spec, pools.get(node.pool))}
        placed = {
            name
            for name, pod in manifests.items()
            if not rejections(pod, node.labels, node.taints, {}, False)
        }
        assert placed == planned, node.name
