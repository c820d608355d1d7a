"""What the autoscaler stand-in expects of a node of the dev stack's `l40s` group (g6e.xlarge, 1 GPU): its template
less the DaemonSet pods a fresh node runs (cluster-autoscaler's podsExpectedOnFreshNode), and a joined node whose
device plugin has not reported counted as the template, not as a node without GPUs."""

from __future__ import annotations

from pathlib import Path

from infra.stackfile import load_stack
from tests.conftest import ROOT
from twin.autoscaler.loop import Autoscaler
from twin.daemonsets import node_daemonset_manifests

DEV = load_stack(ROOT / "Pulumi.dev.yaml")
GROUP = "gpufleet-dev-l40s"
MIB = 2**20


def autoscaler() -> Autoscaler:
    scaler = Autoscaler(DEV, Path("/nonexistent"))
    scaler.daemon_pods = [m["spec"]["template"]["spec"] for m in node_daemonset_manifests(DEV)]
    return scaler


def node(allocatable: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "n1", "labels": {"eks.amazonaws.com/nodegroup": GROUP}}, "spec": {},
            "status": {"allocatable": allocatable}}  # fmt: skip


def test_the_template_from_zero_is_capacity_less_the_daemonset_pods() -> None:
    """4 cores and 32 GiB, less aws-node 25m, kube-proxy 100m, the monitoring agent 10m/30Mi and the NFD
    worker 5m/64Mi (the GPU operands and dcgm-server ask nothing but take a pod slot each: 9 pods)."""
    room = autoscaler()._template(autoscaler().groups[GROUP], [])
    assert round(room["cpu"], 3) == 3.86
    assert room["memory"] == (32768 - 94) * MIB
    assert room["nvidia.com/gpu"] == 1
    assert room["pods"] == 110 - 9


def test_a_node_whose_plugin_has_not_reported_counts_as_the_template() -> None:
    scaler = autoscaler()
    waiting = node({"cpu": "3920m", "memory": "31203Mi", "pods": "110"})
    ready = node({"cpu": "3920m", "memory": "31203Mi", "pods": "110", "nvidia.com/gpu": "1"})
    assert scaler._free([waiting], [])[GROUP] == [scaler._template(scaler.groups[GROUP], [])]
    free = scaler._free([ready], [])[GROUP][0]
    assert free["memory"] == 31203 * MIB and free["nvidia.com/gpu"] == 1
    assert (
        round(scaler._template(scaler.groups[GROUP], [ready])["cpu"], 3) == 3.78
    )  # the real node, less 140m
