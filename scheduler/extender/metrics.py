"""The extender's Prometheus metrics (``GET /metrics``): its fragmentation view and how often it disagrees with
the profile, so a platform owner can judge FragmentationAware on their own cluster, also in shadow mode.

Read from the view at each scrape (a collector, as ``prometheus_client`` custom collectors are written), into a
registry of the view's own, not the library's global one:

- ``gpufleet_extender_fragmented_gpus{pool}``: FGD's fragment measure F of the pool's nodes, in GPUs: the
  unallocated GPU capacity the expected workload cannot use (the simulator's measure, docs/simulation.md);
- ``gpufleet_extender_unallocated_gpus{pool}``, ``gpufleet_extender_gpus{pool}``: unallocated and total GPUs
  of the pool's nodes, as the view counts them (time-sliced replicas as fractions of a GPU);
- ``gpufleet_extender_prioritize_total``: prioritize calls;
- ``gpufleet_extender_compared_total``: the calls for a GPU pod where FGD and the profile each had a node;
- ``gpufleet_extender_disagreements_total``: the compared calls where FGD's node is none of the profile's
  best (NodeResourcesFit MostAllocated on the same candidates and state): the pods the extender moves, or in
  shadow mode would have moved;
- ``gpufleet_extender_shadow``: 1 when the extender scores without deciding (``--shadow``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler.extender.view import ExtenderView
from scheduler.fgd.model import MILLI

PREFIX = "gpufleet_extender"


class ViewCollector(Collector):
    def __init__(self, view: ExtenderView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view = self.view
        pools = view.fragmentation()
        gauges = (
            ("fragmented_gpus", "FGD fragment measure of the pool's nodes: unallocated GPUs the expected workload cannot use", 0),
            ("unallocated_gpus", "Unallocated GPUs of the pool's nodes in the extender's view", 1),
            ("gpus", "GPUs of the pool's nodes in the extender's view", 2),
        )  # fmt: skip
        for name, text, i in gauges:
            family = GaugeMetricFamily(f"{PREFIX}_{name}", text, labels=["pool"])
            for pool, values in sorted(pools.items()):
                family.add_metric([pool], values[i] / MILLI)
            yield family
        with view.lock:
            counts = (view.prioritized, view.compared, view.disagreed)
        counters = (
            ("prioritize", "Prioritize calls"),
            ("compared", "Prioritize calls for a GPU pod where FGD and the profile each had a node"),
            (
                "disagreements",
                "Compared calls where FGD's node is none of the profile's (MostAllocated) best",
            ),
        )
        for (name, text), value in zip(counters, counts, strict=True):
            yield CounterMetricFamily(f"{PREFIX}_{name}", text, value=value)
        yield GaugeMetricFamily(
            f"{PREFIX}_shadow", "1: the extender scores without deciding", value=int(view.shadow)
        )


def registry(view: ExtenderView) -> CollectorRegistry:
    """A registry holding only the view's metrics."""
    out = CollectorRegistry(auto_describe=False)
    out.register(ViewCollector(view))
    return out
