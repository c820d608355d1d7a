"""What Kueue (v0.19.2) writes on a Workload that waits, parsed: the flavor and resource it lacked, and how much.

The message of the QuotaReserved=False condition is `couldn't assign flavors to pod set <name>: <status>`
joined by "; " (pkg/scheduler/flavorassigner/flavorassigner.go:228-246), each status one line per flavor tried:
- `insufficient unused quota for <resource> in flavor <flavor>, <quantity> more needed`
  (flavorassigner.go:1368): the quota exists but is in use, by the team or by borrowers;
- `insufficient quota for <resource> in flavor <flavor>, previously considered podsets requests (<q>) + current
  podset request (<q>) > maximum capacity (<q>)` (flavorassigner.go:1349-1357, reason ExceedsMaxQuota): more
  than the ClusterQueue may ever hold there (nominal quota plus borrowing limit).
- `topology "<name>" doesn't allow to fit any of <n> pod(s)` or `... allows to fit only <k> out of <n> pod(s)`
  (`slice(s)` for sliced pod sets; pkg/cache/scheduler/tas_flavor_snapshot.go `notFitMessage`, and
  `multiLayerNotFitMessage` for several required levels): the quota is there, but no domain of the required
  topology level has room for the pod set together.
The condition's reason is `Pending` unless the UnadmittedWorkloadsObservability gate is on, then the granular
`WaitingForQuota`, `ExceedsMaxQuota`, ... (pkg/scheduler/scheduler.go:1172, apis/kueue/v1beta2/
workload_types.go:941-975), so the message, not the reason, says which.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from kubernetes.utils import parse_quantity

_UNUSED = re.compile(r"insufficient unused quota for (\S+) in flavor (\S+), (\S+) more needed")
_MAX = re.compile(
    r"insufficient quota for (\S+) in flavor (\S+), previously considered podsets requests \((\S+)\) \+ "
    r"current podset request \((\S+)\) > maximum capacity \((\S+)\)"
)


_TOPOLOGY = re.compile(
    r'topology "([^"]+)" (?:doesn\'t allow to fit(?: any of (\d+) (pod|slice)\(s\))?'
    r"|allows to fit only (\d+) out of (\d+) (pod|slice)\(s\))"
)


@dataclass(frozen=True)
class TopologyMisfit:
    """A pod set no domain of its required topology level can hold together (Kueue's topology-aware
    scheduling); `fits` of `wanted` pods (or slices) fit somewhere, `wanted` 0 when Kueue names no count."""

    topology: str
    wanted: int
    fits: int
    unit: str  # "pod" or "slice"

    @property
    def together(self) -> str:
        """The answer's words for what fits together: "(only 1 of its 2 pods fit in any one)"."""
        some = (
            f"only {self.fits} of its {self.wanted}" if self.fits else f"none of its {self.wanted or 'the'}"
        )
        return f"({some} {self.unit}s fit in any one)"


def topology_misfit(message: str) -> TopologyMisfit | None:
    """The first topology that could not hold the pod set, as a QuotaReserved message names it."""
    m = _TOPOLOGY.search(message)
    if m is None:
        return None
    if m[4]:
        return TopologyMisfit(m[1], int(m[5]), int(m[4]), m[6])
    return TopologyMisfit(m[1], int(m[2] or 0), 0, m[3] or "pod")


@dataclass(frozen=True)
class Shortage:
    """One flavor's lack, as Kueue counted it."""

    resource: str
    flavor: str
    needed: Decimal  # more than is free now (unused quota) or more than may ever be held (over the maximum)
    over_maximum: bool
    maximum: Decimal | None = None


def shortages(message: str) -> list[Shortage]:
    """Every flavor's shortage named in a QuotaReserved message, in the order Kueue tried them."""
    found: list[tuple[int, Shortage]] = []
    for m in _UNUSED.finditer(message):
        found.append((m.start(), Shortage(m[1], m[2], parse_quantity(m[3]), False)))
    for m in _MAX.finditer(message):
        total = parse_quantity(m[3]) + parse_quantity(m[4])
        maximum = parse_quantity(m[5])
        found.append((m.start(), Shortage(m[1], m[2], total - maximum, True, maximum)))
    return [s for _, s in sorted(found, key=lambda pair: pair[0])]
