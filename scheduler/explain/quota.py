"""A team's quota per pool, read from ClusterQueues as the API server returns them (kueue.x-k8s.io/v1beta2):
the guarantee (`nominalQuota`), the borrowing and lending limits, what the team uses and borrows now
(`status.flavorsUsage`, apis/kueue/v1beta2/clusterqueue_types.go:377-427), and, per pool, what the cohort
has free and which other teams borrow it.

A flavor is a pool (the compiler names each flavor after its pool), so the rows speak of pools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

Key = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True)
class Share:
    """One ClusterQueue's quota and use of one resource in one flavor."""

    queue: str
    nominal: Decimal
    borrowing_limit: Decimal | None
    lending_limit: Decimal | None
    used: Decimal
    borrowed: Decimal


@dataclass(frozen=True)
class PoolRow:
    """A team's line for one pool and resource, with its cohort's state."""

    pool: str
    resource: str
    mine: Share
    cohort_free: Decimal  # the cohort's quota in this pool not in use by anyone
    borrowers: tuple[tuple[str, Decimal], ...]  # other teams' queues borrowing here, and how much

    @property
    def maximum(self) -> Decimal | None:
        """The most the team may hold here: its quota plus its borrowing limit (None: the cohort's free too)."""
        limit = self.mine.borrowing_limit
        return None if limit is None else self.mine.nominal + limit

    @property
    def lent(self) -> Decimal:
        """Its quota it does not use, which the cohort may borrow (up to the lending limit)."""
        spare = max(Decimal(0), self.mine.nominal - self.mine.used)
        limit = self.mine.lending_limit
        return spare if limit is None else min(spare, limit)


def _q(value: Any) -> Decimal | None:
    return None if value is None else parse_quantity(value)


def shares(queue: Mapping[str, Any]) -> dict[Key, Share]:
    """A ClusterQueue's shares by (flavor, resource)."""
    name = queue["metadata"]["name"]
    usage: dict[Key, tuple[Decimal, Decimal]] = {}
    for flavor in queue.get("status", {}).get("flavorsUsage", []) or []:
        for res in flavor.get("resources", []) or []:
            used = parse_quantity(res.get("total", 0))
            usage[(flavor["name"], res["name"])] = (used, parse_quantity(res.get("borrowed", 0)))
    out: dict[Key, Share] = {}
    for group in queue.get("spec", {}).get("resourceGroups", []) or []:
        for flavor in group.get("flavors", []) or []:
            for res in flavor.get("resources", []) or []:
                key = (flavor["name"], res["name"])
                used, borrowed = usage.get(key, (Decimal(0), Decimal(0)))
                out[key] = Share(
                    name,
                    parse_quantity(res.get("nominalQuota", 0)),
                    _q(res.get("borrowingLimit")),
                    _q(res.get("lendingLimit")),
                    used,
                    borrowed,
                )
    return out


def root_cohort(queue: Mapping[str, Any], parents: Mapping[str, str]) -> str:
    """The top of the queue's cohort tree: each team's queues sit in a cohort of their own under the stack's
    (`scheduler.kueue.team_cohort`), and the GPUs are shared at the top. `parents`: Cohort -> parentName."""
    cohort = str(queue.get("spec", {}).get("cohortName", "") or "")
    seen = set()
    while cohort in parents and parents[cohort] and cohort not in seen:
        seen.add(cohort)
        cohort = parents[cohort]
    return cohort


def cohort_parents(cohorts: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {str(c["metadata"]["name"]): str(c.get("spec", {}).get("parentName", "") or "") for c in cohorts}


def team_rows(
    mine: Mapping[str, Any], queues: Iterable[Mapping[str, Any]], parents: Mapping[str, str]
) -> list[PoolRow]:
    """The team's rows, one per pool and resource of its ClusterQueue, against every queue sharing its cohort
    tree."""
    cohort, name = root_cohort(mine, parents), mine["metadata"]["name"]
    peers = [
        q for q in queues if cohort and root_cohort(q, parents) == cohort and q["metadata"]["name"] != name
    ]
    peer_shares = [shares(q) for q in peers]
    rows = []
    for key, share in shares(mine).items():
        others = [s[key] for s in peer_shares if key in s]
        total = share.nominal + sum((o.nominal for o in others), Decimal(0))
        in_use = share.used + sum((o.used for o in others), Decimal(0))
        borrowers = tuple(sorted((o.queue, o.borrowed) for o in others if o.borrowed > 0))
        rows.append(PoolRow(key[0], key[1], share, max(Decimal(0), total - in_use), borrowers))
    return rows
