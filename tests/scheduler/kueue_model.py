"""A small model of Kueue v0.19.2's flavor assignment, to check what the compiled ClusterQueues let Kueue decide.

It follows `pkg/scheduler/flavorassigner/flavorassigner.go` at v0.19.2 for the parts our objects exercise:
- requests whose name starts with one of the configuration's `resources.excludeResourcePrefixes` are dropped
  before quota is considered (`pkg/workload/workload.go`, dropExcludedResources);
- every other requested resource must be covered by a resource group, else the pod set does not fit
  ("resource %s unavailable in ClusterQueue"; quotaCheckStrategy BlockUndeclared, the default);
- one flavor is chosen per resource group, for all of the group's requested resources together, trying the
  group's flavors in order (`findFlavorForPodSets`);
- a flavor is skipped when the pod's node selector, restricted to the flavor's own label keys, does not
  match the flavor's `nodeLabels` (`checkFlavorForPodSets`, `flavorSelector`);
- a flavor fits when each requested resource fits in the queue's unused nominal quota, or fits by borrowing
  from the cohort (bounded by `borrowingLimit`); with `whenCanBorrow: TryNextFlavor` a flavor that needs
  borrowing is kept only if no later flavor fits without it (`shouldTryNextFlavor`, `isPreferred`).
- topology-aware scheduling (`tas_flavorassigner.go`, checkPodSetAndFlavorMatchForTAS): a pod set uses TAS when
  it asks for a topology or when every flavor of the queue has a `topologyName` (implied); a TAS pod set can
  only take a flavor without a topology if the flavor's group covers none of its requests, and a pod set
  that does not use TAS cannot take a topology flavor.
Preemption, the topology placement itself and admission checks are out of scope: they do not change which
flavors are candidates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.validation import _number

Usage = dict[tuple[str, str, str], float]  # (cluster queue, flavor, resource) -> in use


@dataclass
class Cluster:
    """The Kueue objects of one compiled policy, indexed, and the current usage of each queue."""

    objects: list[dict[str, Any]]
    excluded_prefixes: tuple[str, ...]
    usage: Usage = field(default_factory=dict)

    def by_kind(self, kind: str) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.objects if o["kind"] == kind}


@dataclass(frozen=True)
class PodSet:
    requests: dict[str, float]  # per pod set, already multiplied by the count
    node_selector: dict[str, str] = field(default_factory=dict)
    topology: str | None = None  # the level of a podset-required/preferred-topology annotation


def _quota(spec: dict[str, Any], flavor: str, resource: str) -> dict[str, Any] | None:
    for group in spec.get("resourceGroups", []):
        for entry in group["flavors"]:
            if entry["name"] == flavor:
                for res in entry["resources"]:
                    if res["name"] == resource:
                        return dict(res)
    return None


def _free(cluster: Cluster, cq: str, flavor: str, resource: str) -> tuple[float, float]:
    """(unused nominal quota of the queue, what it could borrow from the cohort) for one flavor/resource."""
    queues = cluster.by_kind("ClusterQueue")
    own = _quota(queues[cq]["spec"], flavor, resource) or {"nominalQuota": 0}
    used = cluster.usage.get((cq, flavor, resource), 0)
    nominal = _number(own["nominalQuota"])
    unused_own = max(0.0, nominal - used)
    lendable = 0.0
    for name, other in queues.items():
        if name == cq:
            continue
        quota = _quota(other["spec"], flavor, resource)
        if quota is None:
            continue
        lends = _number(quota.get("lendingLimit", quota["nominalQuota"]))
        lendable += max(0.0, lends - cluster.usage.get((name, flavor, resource), 0))
    for cohort in cluster.by_kind("Cohort").values():
        quota = _quota(cohort["spec"], flavor, resource)
        if quota is not None:
            lendable += _number(quota["nominalQuota"])
    over = max(0.0, used - nominal)  # already borrowed
    limit = _number(own["borrowingLimit"]) - over if "borrowingLimit" in own else float("inf")
    return unused_own, max(0.0, min(lendable, limit))


def _matches(flavor: dict[str, Any], pod: PodSet) -> bool:
    labels = flavor["spec"].get("nodeLabels", {})
    return all(labels.get(k) == v for k, v in pod.node_selector.items() if k in labels)


def assign(cluster: Cluster, cq: str, pod: PodSet) -> dict[str, str] | str:
    """resource -> flavor for every requested resource, or the reason the pod set does not fit."""
    spec = cluster.by_kind("ClusterQueue")[cq]["spec"]
    flavors = cluster.by_kind("ResourceFlavor")
    requests = {
        name: q
        for name, q in pod.requests.items()
        if q and not any(name.startswith(p) for p in cluster.excluded_prefixes)
    }
    groups = spec["resourceGroups"]
    tas_only = all(flavors[f["name"]]["spec"].get("topologyName") for g in groups for f in g["flavors"])
    uses_tas = pod.topology is not None or tas_only
    for name in requests:
        if not any(name in g["coveredResources"] for g in groups):
            return f"resource {name} unavailable in ClusterQueue"
    out: dict[str, str] = {}
    for group in groups:
        wanted = {n: q for n, q in requests.items() if n in group["coveredResources"]}
        if not wanted:
            continue
        borrowing_choice = None
        for entry in group["flavors"]:
            if not _matches(flavors[entry["name"]], pod):
                continue
            if bool(flavors[entry["name"]]["spec"].get("topologyName")) != uses_tas:
                continue  # a TAS pod set and a non-TAS flavor covering its requests, or the reverse
            fits, borrows = True, False
            for name, q in wanted.items():
                own, cohort = _free(cluster, cq, entry["name"], name)
                if q > own + cohort:
                    fits = False
                elif q > own:
                    borrows = True
            if fits and not borrows:
                chosen = entry["name"]
                break
            if fits and borrowing_choice is None:
                borrowing_choice = entry["name"]
        else:
            if borrowing_choice is None:
                return f"no flavor of {group['coveredResources']} fits"
            chosen = borrowing_choice
        out |= dict.fromkeys(wanted, chosen)
    return out


def node_selector(cluster: Cluster, assigned: dict[str, str], pod: PodSet) -> dict[str, str]:
    """The pod's node selector once Kueue injects the assigned flavors' nodeLabels (all of them merged)."""
    flavors = cluster.by_kind("ResourceFlavor")
    out = dict(pod.node_selector)
    for name in set(assigned.values()):
        out |= flavors[name]["spec"].get("nodeLabels", {})
    return out
