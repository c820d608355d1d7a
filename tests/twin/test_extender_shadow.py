"""The extender in shadow mode behind the real kube-scheduler (a replay twin: kwok nodes, the stacks'
gpu-binpack profile calling the extender's real entry point with `--shadow` and no trace, its watch).

Two 8-GPU, 96-core H100 nodes: `h100-a` runs three 2-GPU pods, `h100-b` two (1 core each), so the extender
learns a target of 2-GPU pods from the cluster. A 1-GPU pod with 90 cores: FGD would put it on `h100-b` (its 3
GPUs left still hold a 2-GPU pod); the profile's MostAllocated packs it onto `h100-a` (7 of 8 GPUs requested
against 5 of 8). In shadow mode the extender scores every node 0, so the scheduler binds the pod where the
profile says, and the extender's /metrics count the disagreement and then FGD's fragment measure of the
cluster the profile left: the one GPU free on `h100-a`, which neither a 2-GPU pod nor, with 3 cores left,
another such 1-GPU pod can use (so the measure is 1 GPU whether or not the view's target has learned the new
pod yet).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.fgd.model import Cluster
from scheduler.sim.policies.fgd_extender import pod_object
from tests.support import eventually
from tests.twin.conftest import toolchain
from tests.twin.test_extender_resources import wait_schedulable
from twin.replay import ReplayTwin

NAMES = ("h100-a", "h100-b")


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplayTwin]:
    toolchain("1.35")
    cluster = Cluster.build(list(NAMES), [96000] * 2, [1024000] * 2, [8, 8], ["H100", "H100"])
    started = ReplayTwin.start(
        cluster, {}, "FragmentationAware", tmp_path_factory.mktemp("shadow"), shadow=True
    )
    try:
        wait_schedulable(started, NAMES)
        yield started
    finally:
        started.stop()


def metrics(twin: ReplayTwin) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(twin.extender_metrics()) for s in f.samples}  # fmt: skip


def test_in_shadow_mode_the_profile_places_and_the_extender_counts_what_fgd_would_have_done(
    twin: ReplayTwin,
) -> None:
    for i, node in enumerate(["h100-a"] * 3 + ["h100-b"] * 2):
        twin.bound(pod_object(f"running-{i}", 1000, 4096, 2, 1000, ""), node)
    twin.settled(5)
    pool = (("pool", "H100"),)
    before = metrics(twin)
    assert before[("gpufleet_extender_shadow", ())] == 1
    assert before[("gpufleet_extender_unallocated_gpus", pool)] == 6
    assert before[("gpufleet_extender_fragmented_gpus", pool)] == 0  # every free GPU holds a 2-GPU pod

    assert twin.place(pod_object("one-gpu", 90000, 4096, 1, 1000, "")) == "h100-a"  # the profile's choice

    after = eventually(lambda: (m := metrics(twin))[("gpufleet_extender_unallocated_gpus", pool)] == 5 and m,
                       "the extender's watch to see the pod bound", timeout=30, every=0.2)  # fmt: skip
    assert after[("gpufleet_extender_prioritize_total", ())] >= 1
    assert (
        after[("gpufleet_extender_compared_total", ())] == after[("gpufleet_extender_prioritize_total", ())]
    )
    assert (
        after[("gpufleet_extender_disagreements_total", ())]
        == after[("gpufleet_extender_compared_total", ())]
    )
    assert after[("gpufleet_extender_fragmented_gpus", pool)] == pytest.approx(1.0)
    log = (twin.folder / "logs" / "extender.log").read_text(errors="replace")
    assert "POST /prioritize" in log
