"""The gpu-binpack profile scores every feasible node: on a 300-node replay twin the real kube-scheduler, run with
the configuration a FragmentationAware stack renders, hands the extender all of them, so each GPU pod reaches the
one node that fits it best, wherever that node sits in the scheduler's node list.

Without `percentageOfNodesToScore` kube-scheduler stops filtering at `numFeasibleNodesToFind` feasible nodes:
for 300 nodes `max(100, 300 * (50 - 300/125) / 100)` = 144 (kubernetes v1.35.8 pkg/scheduler/schedule_one.go
`numFeasibleNodesToFind`, `minFeasibleNodesToFind = 100`), taken from `nextStartNodeIndex` on through the node
list, and only those go to the extender (`findNodesThatPassExtenders`). That list is in the order the scheduler's
informer delivered the nodes (pkg/scheduler/backend/cache/node_tree.go `addNode`, `list`: one zone here), which
in 1.35 is a map's order: WatchListClient is on by default (client-go v0.35.8 features/known_features.go) and
the reflector collects the streamed nodes in a map-backed store before `Replace(temporaryStore.List())`
(tools/cache/reflector.go `watchList`). So each pod's window holds its best node about half the time: the 15
pods below all reach theirs without the setting with a chance of about 2^-15, which the control run shows.

A pod's best node is the one the extender scores 10: FGD's best, the first by name among its equals (as the
simulator's FGD takes it), computed here with the extender's own view of the same nodes and pods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.scheduling import scheduler_inputs
from infra.stackfile import parse_config
from scheduler import compile
from scheduler.fgd.model import Cluster, Workload
from scheduler.labels import SCHEDULER_NAMESPACE, SECONDARY_SCHEDULER_NAME
from scheduler.placement import CONFIG_FILE
from scheduler.sim.policies.fgd_extender import pod_object
from tests.conftest import ROOT
from tests.twin.conftest import toolchain
from twin.replay import ReplayTwin

NODES = 300
GPUS = 16  # per ordinary node; node `best(i)` has i GPUs, i = 1..15
EXPECTED = Workload.build([8000, 1000], [65_536, 8192], [8, 1], [1000, 1000], ["", ""])


def best(gpus: int) -> str:
    return f"gpu-{NODES - GPUS + gpus:03d}"


def cluster() -> Cluster:
    """285 nodes with 16 GPUs and 15 with 1..15. An i-GPU pod fills node best(i) exactly: the extender's FGD
    ranks it first (with the other nodes whose free GPUs could not hold an 8-GPU job of the expected workload
    anyway), and among those MostAllocated (10x GPU weight) ranks it alone first, every other node then being
    at most i/(i+1) allocated in GPUs (checked offline with the extender's own view, and by the run below)."""
    names = [f"gpu-{i:03d}" for i in range(NODES)]
    gpus = [GPUS] * (NODES - GPUS + 1) + list(range(1, GPUS))
    return Cluster.build(names, [96_000] * NODES, [1_048_576] * NODES, gpus, ["H100"] * NODES)


def rendered_config() -> dict[str, Any]:
    """The gpu-binpack KubeSchedulerConfiguration of the metal stack with FragmentationAware, as the stack
    renders it into its ConfigMap (the extender at http://127.0.0.1:8888, where the replay twin runs it)."""
    config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    config["gpufleet:scheduling"] = {**config.get("gpufleet:scheduling", {}),
                                     "placement": {"strategy": "FragmentationAware"}}  # fmt: skip
    objects = compile(*scheduler_inputs(parse_config(config, "metal")))
    name = f"{SECONDARY_SCHEDULER_NAME}-config"
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name
             and o["metadata"].get("namespace") == SCHEDULER_NAMESPACE]  # fmt: skip
    return dict(yaml.safe_load(cm["data"][CONFIG_FILE]))


def placements(config: dict[str, Any], folder: Path) -> list[str | None]:
    """Where the pods asking for 1, 2, ... 15 GPUs land, one after the other, under ``config``."""
    twin = ReplayTwin.start(cluster(), {}, "FragmentationAware", folder, target=EXPECTED, config=config)
    try:
        return [twin.place(pod_object(f"gpus-{i:02d}", 1000, 8192, i, 1000, "")) for i in range(1, GPUS)]
    finally:
        twin.stop()


def best_nodes() -> list[str]:
    """Where the extender sends the pods asking for 1, 2, ... 15 GPUs, one after the other: its own view of the
    300 nodes asked with every node, in name order, each pod then bound where it went."""
    from scheduler.extender import wire
    from scheduler.extender.resources import pod_request
    from scheduler.extender.view import ExtenderView
    from scheduler.sim.policies.fgd_extender import node_object

    c = cluster()
    view = ExtenderView(expected=EXPECTED)
    for n, cpu, mem, gpus, model in zip(
        c.names, c.cpu_milli, c.memory_mib, c.num_gpu, c.gpu_model, strict=True
    ):
        view.set_node(node_object(str(n), int(cpu), int(mem), int(gpus), str(model), 1))
    names = [str(n) for n in c.names]
    out = []
    for i in range(1, GPUS):
        pod = pod_object(f"gpus-{i:02d}", 1000, 8192, i, 1000, "")
        passed = view.filter(wire.parse_args({"pod": pod, "nodenames": names}))
        fit = passed.get("nodenames") or passed.get("NodeNames") or []
        ranked = view.prioritize(wire.parse_args({"pod": pod, "nodenames": fit}))
        (top,) = [
            h.get("host", h.get("Host"))
            for h in ranked
            if h.get("score", h.get("Score")) == wire.MAX_PRIORITY
        ]
        view.pod_bound(f"bound-{i:02d}", str(top), pod_request(pod))
        out.append(str(top))
    return out


def test_each_gpu_pod_reaches_its_best_node_of_300(tmp_path: Path) -> None:
    toolchain("1.35")
    expected = best_nodes()
    assert len({int(n.split("-")[1]) // 100 for n in expected}) > 1, expected  # spread over the node list
    assert placements(rendered_config(), tmp_path / "rendered") == expected


def test_without_the_setting_pods_miss_their_best_node(tmp_path: Path) -> None:
    """The control: the same rendered configuration with `percentageOfNodesToScore` removed from its profile.
    Every pod is still placed, but some land elsewhere: their best node was outside the 144 nodes found."""
    toolchain("1.35")
    config = rendered_config()
    (profile,) = config["profiles"]
    if profile.pop("percentageOfNodesToScore", None) is None:
        pytest.fail("the rendered gpu-binpack profile no longer sets percentageOfNodesToScore")
    got = placements(config, tmp_path / "default")
    assert None not in got
    assert got != best_nodes()
