"""What the measured results say about `placement.strategy: FragmentationAware` for a stack's pools.

The numbers are the ones docs/simulation.md reports (unallocated GPU % at 100 % arrived, mean over seeds; less
is better), kept here as data so `invoke plan` can say, for the layouts a stack deploys, whether FGD has been
seen ahead of the profile it extends (MostAllocated), and through what: the real kube-scheduler on a replay
twin, or the simulator only. tests/foundation/test_placement_evidence.py holds this table to the docs' tables.

FragmentationAware is *experimental* while no deployable layout has shown it 1 point or more ahead of
MostAllocated through the real scheduler. Whole GPUs on identical nodes are what MostAllocated with the GPU
weighted 10 already packs best-fit, and a time-sliced replica's GPU is the device plugin's choice, not the
scheduler's, so FGD and MostAllocated mostly pick the same nodes there. FGD's gains (the paper's) come where
the scheduler chooses the GPU fraction: on gpufleet's layouts that is DRA shares, which the extender scores by FGD
over the devices' free shares (`--dra-shares`). An openb sample replayed through the real scheduler on DRA
shares (docs/simulation.md, "GPU shares through DRA, through the real scheduler": 60 of the 1,213 nodes, ten
seeds) has it 1.47 ± 0.49 points ahead on the mean with GPU pods only, the case a stack's GPU taint makes, and
the target the extender learns from the pool's claims, as a stack renders it (0.83 to 1.99 a seed; 1.59 ± 0.62
given the trace as its target), so that layout lifts the mark; the plan states the gain as a mean, the docs its
spread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from infra.spec import ClusterSpec

PAYS_POINTS = 1.0  # the gain over MostAllocated, in points of unallocated GPU %, that counts as paying
SIMULATION = "docs/simulation.md"
Through = Literal["real scheduler", "simulator"]


@dataclass(frozen=True)
class Measurement:
    setting: str  # the cluster and the openb trace, as docs/simulation.md names them
    layouts: frozenset[str]  # the pool sharing modes that received pods (empty: no deployable layout)
    fgd: float  # unallocated GPU % with FragmentationAware (FGD)
    most_allocated: float  # with the MostAllocated profile alone
    through: Through
    section: str  # where docs/simulation.md reports it

    @property
    def gain(self) -> float:
        """Points of unallocated GPU FGD saves against MostAllocated (negative: it leaves more idle)."""
        return round(self.most_allocated - self.fgd, 2)


WHOLE_AND_SLICED = frozenset({"exclusive", "timeSlicing"})
MEASURED = (
    Measurement("metal (7 nodes, 44 GPUs), default", WHOLE_AND_SLICED, 5.97, 5.97, "real scheduler",
                "Through the real scheduler"),
    Measurement("metal, multigpu50", WHOLE_AND_SLICED, 17.05, 17.05, "real scheduler",
                "Through the real scheduler"),
    Measurement("example-prod (27 nodes, 80 GPUs), default", frozenset({"exclusive", "mig"}), 24.50, 24.81,
                "real scheduler", "Through the real scheduler"),
    Measurement("example-prod, multigpu50", frozenset({"exclusive", "mig"}), 27.32, 27.32, "real scheduler",
                "Through the real scheduler"),
    # whole GPUs and time-sliced replicas on one node: no device plugin offers that layout
    Measurement("openb nodes as deployed, default", frozenset(), 3.09, 3.81, "simulator", "As deployed"),
    Measurement("openb nodes as deployed, multigpu50", frozenset(), 1.33, 2.55, "simulator", "As deployed"),
    Measurement("openb nodes in DRA shares, gpushare100", frozenset({"draShares"}), 8.08, 12.92, "simulator",
                "GPU shares through DRA"),
    Measurement("openb nodes in DRA shares, default", frozenset({"draShares"}), 3.12, 8.32, "simulator",
                "GPU shares through DRA"),
    # ten seeds of a 60-node sample, GPU pods only (a stack's GPU taint keeps CPU-only pods off its GPU nodes),
    # the extender learning its target as a stack renders it (no trace given)
    Measurement("openb 60-node samples in DRA shares, GPU pods only with the learned target",
                frozenset({"draShares"}), 3.61, 5.08, "real scheduler",
                "GPU shares through DRA, through the real scheduler"),
)  # fmt: skip

LAYOUT_NAMES = {
    "exclusive": "whole GPUs",
    "timeSlicing": "time-sliced",
    "mig": "MIG",
    "draShares": "DRA shares",
}
NOT_SCORED = {
    "mig": "the extender scores MIG pods as CPU-only, so the profile places them",
}


@dataclass(frozen=True)
class Layout:
    pools: list[str]
    says: str


@dataclass(frozen=True)
class PlacementVerdict:
    """What the plan says about FragmentationAware for one stack."""

    experimental: bool  # no deployable layout has shown FGD >= PAYS_POINTS ahead through the real scheduler
    pays: bool  # one of the stack's layouts has
    layouts: dict[str, Layout]  # sharing mode -> its pools and what was measured on it
    line: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def best_real(layout: str) -> Measurement | None:
    """The real-scheduler measurement where FGD did best against MostAllocated on a cluster with ``layout``."""
    seen = [m for m in MEASURED if m.through == "real scheduler" and layout in m.layouts]
    return max(seen, key=lambda m: m.gain, default=None)


def simulated_gains(layout: str) -> list[float]:
    return sorted(m.gain for m in MEASURED if layout in m.layouts and m.through == "simulator")


def _layout_says(layout: str) -> str:
    if layout in NOT_SCORED:
        return NOT_SCORED[layout]
    best = best_real(layout)
    if best is None:
        return "not measured through the real scheduler"
    return f"FGD at most {best.gain:.2f} points ahead through the real scheduler ({best.setting})"


def verdict(spec: ClusterSpec) -> PlacementVerdict | None:
    """The plan's word on FragmentationAware for ``spec``; None when the stack does not use it."""
    if spec.scheduling.placement.strategy != "FragmentationAware":
        return None
    deployable_best = max((m for m in MEASURED if m.through == "real scheduler" and m.layouts),
                          key=lambda m: m.gain)  # fmt: skip
    experimental = deployable_best.gain < PAYS_POINTS
    layouts: dict[str, Layout] = {}
    for pool in spec.node_pools:
        mode = pool.sharing.mode
        layouts.setdefault(mode, Layout([], _layout_says(mode))).pools.append(pool.name)
    pays = any((b := best_real(mode)) is not None and b.gain >= PAYS_POINTS for mode in layouts
               if mode not in NOT_SCORED)  # fmt: skip
    head = "FragmentationAware is experimental" if experimental else "FragmentationAware"
    if experimental:
        head += (
            f": no deployable layout has shown FGD {PAYS_POINTS:g} point or more ahead of MostAllocated through "
            f"the real scheduler (best {deployable_best.gain:.2f} points, {deployable_best.setting}; {SIMULATION})"
        )
    said = "; ".join(f"{LAYOUT_NAMES[mode]} ({', '.join(e.pools)}): {e.says}" for mode, e in layouts.items())
    dra = simulated_gains("draShares")
    dra_real = best_real("draShares")
    through = (
        f", {dra_real.gain:.1f} through the real scheduler ({dra_real.setting})"
        if dra_real is not None
        else ", not yet replayed through the real scheduler"
    )
    line = (
        f"{head}. It {'pays' if pays else 'is not shown to pay'} on this stack's layouts: {said}. It pays where "
        f"the scheduler picks the GPU fraction: DRA shares, {dra[0]:.1f}-{dra[-1]:.1f} points ahead in the "
        f"simulator{through}. To decide on your own cluster: `placement.shadow: "
        "true` and the extender's gpufleet_extender_disagreements_total against "
        "gpufleet_extender_compared_total, or `invoke trace --from-cluster` replayed by `invoke simulate` on the stack "
        "(docs/scheduling.md)."
    )
    return PlacementVerdict(experimental, pays, layouts, line)
