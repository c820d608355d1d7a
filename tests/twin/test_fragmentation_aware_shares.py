"""FragmentationAware on GPU shares through DRA, on the twin: the extender as deployed (`--dra-shares`, as the
scheduler pod's ServiceAccount, so its reads of ResourceSlices and ResourceClaims are the rights the policy
gives it) behind the real 1.36 gpu-binpack scheduler, whose DRA allocator takes the shares from the twin's
driver-shaped ResourceSlices (twin.dra), Kueue admitting the Jobs in shares.

The metal stack on 1.36 with its L40S pool (3 hosts x 4 GPUs) at `dra-shares` (8 shares a GPU) and placement
FragmentationAware. Share Jobs go one after another; before each, the in-process simulator's FGD policy, under
the allocator's first-fit rule (scheduler.sim, `share_rule="first-fit"`), scores the pod on the pool as the
claims allocated so far left it, with the extender's learned target (the shares of the claims allocated so far
and the one pending, each with its pod's CPU); the real scheduler must bind the pod to the simulator's node. The sequence is one where the
simulator's MostAllocated, on the same states, would pack onto another node.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes.utils import parse_quantity

from scheduler.dra import DRIVER, SHARES
from scheduler.fgd.model import MILLI, Cluster
from tests.sim.tiny import first_fit_scores, workload
from tests.support import eventually
from tests.twin.conftest import stack_variant, start_twin, twin_log
from tests.twin.kube import Kube, name
from tests.twin.test_dra_shares import share_job
from tests.twin.test_team_rules import pods_of

SEQUENCE = (
    2,
    4,
    2,
    1,
    1,
)  # shares of 8 per pod (the rendered templates: 1, 2, 4), 10 in all: within vision's 32
CPU_MILLI, MEMORY_MIB = 2000, 8192  # what share_job's pods ask


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    import yaml

    from tests.conftest import ROOT

    config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    cluster = {**config["gpufleet:cluster"], "kubernetesVersion": "1.36"}
    pools = config["gpufleet:nodePools"]
    pools[1] = {k: v for k, v in pools[1].items() if k != "sharing"} | {"sharing": "dra-shares"}
    scheduling = {**config.get("gpufleet:scheduling", {}), "placement": {"strategy": "FragmentationAware"}}
    path = stack_variant(
        tmp_path_factory, "metal", "metal-shares-fgd", cluster=cluster, nodePools=pools, scheduling=scheduling
    )
    running = start_twin(tmp_path_factory, path)
    yield Kube.of(running)
    running.stop()


def share_pool(kube: Kube) -> tuple[Cluster, dict[str, list[str]]]:
    """The pool's nodes as the simulator's cluster (their allocatable CPU and memory, a GPU per share device)
    and each node's devices in slice order, from the twin's ResourceSlices and Nodes."""
    devices = {
        s["spec"]["nodeName"]: [d["name"] for d in s["spec"]["devices"]]
        for s in kube.items("resourceslices")
        if s["spec"].get("driver") == DRIVER
    }
    nodes = {n["metadata"]["name"]: n for n in kube.items("nodes") if n["metadata"]["name"] in devices}
    names = sorted(nodes)
    alloc = [nodes[n]["status"]["allocatable"] for n in names]
    cluster = Cluster.build(
        names,
        [int(parse_quantity(a["cpu"]) * 1000) for a in alloc],
        [int(parse_quantity(a["memory"]) // 2**20) for a in alloc],
        [len(devices[n]) for n in names],
        ["L40S"] * len(names),
    )
    return cluster, devices


def allocations(
    kube: Kube, cluster: Cluster, devices: dict[str, list[str]]
) -> list[tuple[int, int, int, list[int], int]]:
    """The pool's allocated claims as the simulator's allocations (node, cpu, mem, [gpu], milli)."""
    out = []
    for claim in kube.items("resourceclaims", "vision"):
        for result in (
            ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
        ):
            node = result["pool"]
            if result["driver"] == DRIVER and node in devices:
                milli = int(result["consumedCapacity"][SHARES]) * MILLI // 8
                out.append(
                    (
                        cluster.names.index(node),
                        CPU_MILLI,
                        MEMORY_MIB,
                        [devices[node].index(result["device"])],
                        milli,
                    )
                )
    return out


def best(scores: list[int], cluster: Cluster) -> str:
    """The best-scored node, the first by name among equals (the simulator's tie-break, and the extender's)."""
    return str(cluster.names[scores.index(max(scores))])


def bound_node(kube: Kube, job_name: str) -> str | None:
    return next(
        (p["spec"]["nodeName"] for p in pods_of(kube, "vision", job_name) if p["spec"].get("nodeName")), None
    )


def three_slices(kube: Kube) -> tuple[Cluster, dict[str, list[str]]] | None:
    pool = share_pool(kube)
    return pool if pool[0].size == 3 else None


def test_each_share_pod_is_bound_where_the_simulators_fgd_puts_it(twin: Kube) -> None:
    vision = twin.as_member(("vision-team",))
    cluster, devices = eventually(lambda: three_slices(twin), "the pool's three slices")
    fgd_nodes: list[str] = []
    packed_nodes: list[str] = []
    bound_nodes: list[str] = []
    for i, shares in enumerate(SEQUENCE):
        placed = allocations(twin, cluster, devices)
        assert len(placed) == i, placed
        target = workload(*[(CPU_MILLI, 0, 1, s * MILLI // 8) for s in SEQUENCE[: i + 1]])
        pod = (CPU_MILLI, MEMORY_MIB, 1, shares * MILLI // 8)
        fgd_nodes.append(best(first_fit_scores(cluster, "FGD", pod, placed, target), cluster))
        packed_nodes.append(best(first_fit_scores(cluster, "MostAllocated", pod, placed, target), cluster))
        job_name = name(f"share{i}")
        assert vision.create(share_job(job_name, "vision", shares)).ok
        node = eventually(lambda: bound_node(twin, job_name), f"pod {i} to be bound", 90)  # noqa: B023
        count = i + 1
        eventually(lambda: len(allocations(twin, cluster, devices)) == count, f"claim {i} allocated", 60)  # noqa: B023
        bound_nodes.append(node)
        log = twin_log(twin.twin, "extender")[-3000:] if twin.twin else ""
        assert node == fgd_nodes[-1], (
            f"pod {i} ({shares} shares) bound to {node}, the simulator's FGD says {fgd_nodes[-1]}; "
            f"so far {bound_nodes} vs {fgd_nodes}\n{log}"
        )
    assert fgd_nodes != packed_nodes, (fgd_nodes, packed_nodes)  # the extender changed where pods went
