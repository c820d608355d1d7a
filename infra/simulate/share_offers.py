"""What a pod asking part of a GPU can request on a stack, and which of it a team member asks.

A sharing pool's GPUs appear to Kubernetes as a resource of their own (:func:`scheduler.resources.gpu_resource`):
time-sliced replicas as ``nvidia.com/gpu.shared``, MIG instances of the pool's profile as
``nvidia.com/mig-<profile>``, DRA shares as ``gpufleet.io/gpu-shares`` through a ResourceClaim. A pod names one
of them in its request, and that is all a user chooses: every team's ClusterQueue lists every ordinary pool as a
flavor carrying every GPU resource, but only the pool exposing a resource has quota in it, so Kueue admits the
pod to a pool of the resource it named, trying those pools in the queue's flavor order (the dynamic engine does
that, :mod:`scheduler.sim.dynamic.engine`). The pools a share is routed to are therefore the
pools of one offer, and the pool among them is the queue's decision, not the route's.

A request no node of the resource's pools can hold (more cores or memory than the pool's nodes have) never
runs, so a user asks a slice on hardware that holds the pod: only the offers with a node big enough for the
pod's cores and memory are weighed, and where none has one the pod is routed by size alone (and reported as
one no node can host).

What one unit gives is fixed by the resource: a time-sliced replica is ``1/replicas`` of a GPU and a pod gets one
(the device plugin's ``failRequestsGreaterThanOne``), a MIG instance ``1/instances`` (several instances are
several devices, not a larger slice), and a DRA claim names the shares that cover the ask. A user sizes the
request to the work: the offer whose slice is the smallest that still covers the pod's fraction, so the work has
what it asked without holding more of a GPU than it needs; where no slice covers it, the largest there is (the
closest to the ask a share can come). Two offers giving the same slice are both left to the flavor order.

Pools exposing one resource at different sizes (two time-sliced pools with different replica counts) are
offered apart, by size: the simulator gives a pod one slice size, where on the cluster the flavor order would
pick between them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.fgd.model import MILLI


@dataclass(frozen=True)
class ShareOffer:
    """One resource a pod can ask part of a GPU by, at one slice size, and the pools that expose it."""

    resource: str
    units: int  # per GPU: replicas, MIG instances, DRA shares
    claims: bool  # DRA shares: a claim names as many shares as cover the ask
    pools: tuple[str, ...]  # the routable pools exposing it, in the spec's order

    @property
    def unit_milli(self) -> int:
        return MILLI // self.units

    def given(self, asked_milli: int) -> int:
        """Milli-GPU a pod asking ``asked_milli`` holds: one unit, or the shares that cover the ask."""
        if self.claims:
            return self.unit_milli * max(1, -(-asked_milli // self.unit_milli))
        return self.unit_milli


def share_offers(
    routable: Sequence[str], units: Mapping[str, int], resources: Mapping[str, str], claims: frozenset[str]
) -> tuple[ShareOffer, ...]:
    """The stack's sharing pools grouped by the resource and slice size a pod asks them by, in the spec's order."""
    grouped: dict[tuple[str, int], list[str]] = {}
    for pool in routable:
        if units[pool] > 1:
            grouped.setdefault((resources[pool], units[pool]), []).append(pool)
    return tuple(
        ShareOffer(resource, n, all(p in claims for p in pools), tuple(pools))
        for (resource, n), pools in grouped.items()
    )


def restricted(offers: Sequence[ShareOffer], keep: Collection[str]) -> list[ShareOffer]:
    """The offers with only their pools in ``keep``; an offer left with no pool is left out."""
    kept = (replace(o, pools=tuple(p for p in o.pools if p in keep)) for o in offers)
    return [o for o in kept if o.pools]


def chosen_offers(offers: Sequence[ShareOffer], asked_milli: int) -> tuple[ShareOffer, ...]:
    """The offers a pod asking ``asked_milli`` requests: the smallest slice that covers the ask, else the largest
    slice (several where they give the same). Empty where there is no offer."""
    if not offers:
        return ()
    covering = [o for o in offers if o.given(asked_milli) >= asked_milli]
    if covering:
        best = min(o.given(asked_milli) for o in covering)
        return tuple(o for o in covering if o.given(asked_milli) == best)
    best = max(o.given(asked_milli) for o in offers)
    return tuple(o for o in offers if o.given(asked_milli) == best)
